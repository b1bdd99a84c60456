// `precon run`'s progress display. On a terminal: a frame redrawn in place (cursor up over the
// last frame, erase each line, write the new one; nothing else of the terminal is used), one
// line per running trial and a summary line, sized to the terminal's width. Elsewhere (a log
// file, a pipe): the same trial lines, unpadded and without a bar, at a steady rate.
// The formatting functions are pure; LiveView holds only how many lines it drew last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace precon::cli {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

struct TrialProgress {
  int64_t id = 0;             // the trial's identifier
  std::string values;         // the swept values that tell it from the others (trial_labels)
  int64_t step = 0;           // last step reported
  int64_t steps = 0;          // train.steps
  double eta_s = kUnknown;    // seconds left, NaN = unknown
  double train_loss = kUnknown;
  double val_loss = kUnknown;
};

struct SweepProgress {
  int done = 0, running = 0, pending = 0, failed = 0, cancelled = 0;
  double elapsed_s = 0;       // since `precon run` submitted the sweep
  double eta_s = kUnknown;    // seconds until the last trial ends, NaN = unknown
};

struct TerminalSize {
  int columns = 80;
  int rows = 24;
};

// The terminal's size from ioctl(TIOCGWINSZ) on fd; 80x24 when fd is no terminal or says 0.
TerminalSize terminal_size(int fd);

// For each trial's swept parameters (a JSON object each), the "key=value" pairs that tell it from
// the others: only keys the trial has, and of those only keys that take more than one value
// among the trials that have them (all its keys when none does). optimizer.name reads
// "optimizer", other optimizer.* keys lose the prefix.
std::vector<std::string> trial_labels(const std::vector<nlohmann::json>& params);

std::string format_duration(double seconds);                 // "42s", "3m05s", "1h02m", "--"
std::string progress_bar(double fraction, int width);         // "[#####.....]", width columns in all
// One trial: "trial ID  VALUES  [bar]  step/steps  ETA 3m05s  train 2.345  val 2.401", fitted
// to width-1 columns (so a full line never wraps); width 0 = unlimited, with no bar (plain mode).
// id_width and values_width align the columns of a frame (0 = as long as this trial's).
std::string trial_line(const TrialProgress& t, int width, size_t id_width = 0, size_t values_width = 0);
std::string summary_line(const SweepProgress& s, int width);
// A frame: one line per running trial (at most rows-2 of them, then "... N more running"), then
// the summary.
std::vector<std::string> frame(const std::vector<TrialProgress>& running, const SweepProgress& s,
                               const TerminalSize& size);

// Redraws frames in place. Not thread-safe: one writer.
class LiveView {
 public:
  // The bytes that replace the last frame with `lines`; the cursor ends below the new frame.
  std::string redraw(const std::vector<std::string>& lines);
  // Something else was written below the frame: the next frame starts after it.
  void detach() { drawn_ = 0; }

 private:
  size_t drawn_ = 0;  // lines of the frame on screen, above the cursor
};

}  // namespace precon::cli
