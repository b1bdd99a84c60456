#include "orchestrator/cli/live_view.h"

#include <sys/ioctl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace precon::cli {

namespace {

std::string number(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string short_key(const std::string& key) {
  if (key == "optimizer.name") return "optimizer";
  return key.starts_with("optimizer.") ? key.substr(10) : key;
}

std::string value_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string pad(std::string s, size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}

// At most n columns; a cut is marked with "~" (ASCII, so bytes are columns).
std::string fit(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  if (n == 0) return "";
  return s.substr(0, n - 1) + "~";
}

}  // namespace

TerminalSize terminal_size(int fd) {
  TerminalSize size;
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0) {
    if (ws.ws_col > 0) size.columns = ws.ws_col;
    if (ws.ws_row > 0) size.rows = ws.ws_row;
  }
  return size;
}

std::vector<std::string> trial_labels(const std::vector<nlohmann::json>& params) {
  std::map<std::string, std::set<std::string>> seen;  // key -> the values it takes
  for (const nlohmann::json& p : params)
    if (p.is_object())
      for (auto& [k, v] : p.items()) seen[k].insert(value_text(v));
  std::vector<std::string> labels;
  for (const nlohmann::json& p : params) {
    std::string all, differing;
    const auto add = [&](const std::string& k, const nlohmann::json& v) {
      const std::string pair = short_key(k) + "=" + value_text(v);
      all += (all.empty() ? "" : " ") + pair;
      if (seen[k].size() > 1) differing += (differing.empty() ? "" : " ") + pair;
    };
    // The optimizer's name first: it says which of the other keys mean anything.
    if (p.is_object() && p.contains("optimizer.name")) add("optimizer.name", p["optimizer.name"]);
    if (p.is_object())
      for (auto& [k, v] : p.items())
        if (k != "optimizer.name") add(k, v);
    labels.push_back(!differing.empty() ? differing : !all.empty() ? all : "(base config)");
  }
  return labels;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  return buf;
}

std::string progress_bar(double fraction, int width) {
  const int inner = std::max(0, width - 2);
  const double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(std::floor(f * inner + 1e-9));
  std::string bar(static_cast<size_t>(inner) + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

std::string trial_line(const TrialProgress& t, int width, size_t id_width, size_t values_width) {
  const std::string id = pad("trial " + std::to_string(t.id), id_width);
  const std::string steps = std::to_string(t.steps);
  std::string step = std::to_string(t.step);
  if (width > 0) step.insert(0, steps.size() > step.size() ? steps.size() - step.size() : 0, ' ');
  const std::string stats = step + "/" + steps + "  ETA " + format_duration(t.eta_s) + "  train " +
                            number(t.train_loss) + "  val " + number(t.val_loss);
  if (width <= 0) return id + "  " + t.values + "  " + stats;
  // Columns: id, values, bar and stats with two spaces between; the values get what they need
  // (up to values_width) as long as the bar keeps 12 columns, the bar takes the rest (up to 42).
  const size_t avail = static_cast<size_t>(width - 1);
  const size_t fixed = id.size() + stats.size() + 6;
  const size_t want = std::max(values_width, t.values.size());
  size_t values_cols = 0, bar_cols = 0;
  if (avail > fixed + 12) {
    const size_t room = avail - fixed;
    values_cols = std::min(want, room - 12);
    bar_cols = std::min<size_t>(42, room - values_cols);
  }
  const double fraction = t.steps > 0 ? static_cast<double>(t.step) / static_cast<double>(t.steps) : 0.0;
  std::string line = id + "  " + pad(fit(t.values, values_cols), values_cols) + "  ";
  if (bar_cols >= 4) line += progress_bar(fraction, static_cast<int>(bar_cols)) + "  ";
  return fit(line + stats, avail);
}

std::string summary_line(const SweepProgress& s, int width) {
  std::string line = "sweep: " + std::to_string(s.done) + " done, " + std::to_string(s.running) + " running, " +
                     std::to_string(s.pending) + " pending, " + std::to_string(s.failed) + " failed";
  if (s.cancelled > 0) line += ", " + std::to_string(s.cancelled) + " cancelled";
  line += "  elapsed " + format_duration(s.elapsed_s) + "  ETA " + format_duration(s.eta_s);
  return width > 0 ? fit(line, static_cast<size_t>(width - 1)) : line;
}

std::vector<std::string> frame(const std::vector<TrialProgress>& running, const SweepProgress& s,
                               const TerminalSize& size) {
  size_t id_width = 0, values_width = 0;
  for (const TrialProgress& t : running) {
    id_width = std::max(id_width, ("trial " + std::to_string(t.id)).size());
    values_width = std::max(values_width, t.values.size());
  }
  // Cursor-up cannot reach lines scrolled off the top: the frame stays within the screen.
  const size_t room = static_cast<size_t>(std::max(1, size.rows - 2));
  const size_t shown = running.size() > room ? room - 1 : running.size();
  std::vector<std::string> lines;
  for (size_t i = 0; i < shown; ++i) lines.push_back(trial_line(running[i], size.columns, id_width, values_width));
  if (shown < running.size())
    lines.push_back(fit("... " + std::to_string(running.size() - shown) + " more running",
                        static_cast<size_t>(std::max(1, size.columns - 1))));
  lines.push_back(summary_line(s, size.columns));
  return lines;
}

std::string LiveView::redraw(const std::vector<std::string>& lines) {
  std::string out;
  if (drawn_ > 0) out += "\r\x1b[" + std::to_string(drawn_) + "A";
  for (const std::string& line : lines) out += "\x1b[2K" + line + "\n";
  // A shorter frame: blank what is left of the longer one and come back up.
  if (drawn_ > lines.size()) {
    for (size_t i = lines.size(); i < drawn_; ++i) out += "\x1b[2K\n";
    out += "\x1b[" + std::to_string(drawn_ - lines.size()) + "A";
  }
  drawn_ = lines.size();
  return out;
}

}  // namespace precon::cli
