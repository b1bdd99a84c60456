// Following a run's metrics.jsonl as a program appends to it: what a trial that runs a recipe's
// own program (docs/recipes.md, Trials that run any program) reports through its run directory.
// Each read returns the points of the lines completed since the last one; a line that is not a
// record is skipped and described, the others are kept. A file cut back or rewritten (a program
// that resumes from a checkpoint and drops the records after it) is read again from its start:
// the store keeps one point per (trial, metric, step), so a line read twice changes nothing.
// Thread-safety: one follower is used by one thread (the scheduler's strand).
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "orchestrator/store/store.h"

namespace precon::orch {

class MetricsFollower {
 public:
  static constexpr size_t kMaxNames = 256;          // distinct metric names per trial, as the report API allows
  static constexpr size_t kMaxLine = 64 * 1024;     // longer lines are skipped
  static constexpr uintmax_t kMaxRead = 8u << 20;   // bytes taken per read; the rest at the next

  explicit MetricsFollower(std::filesystem::path path) : path_(std::move(path)) {}

  struct Batch {
    std::vector<MetricPoint> points;
    std::vector<std::string> problems;  // "metrics.jsonl line 7: ...", one per skipped line or field
  };
  // The lines completed since the last read. at_end: the program has ended, so a last line
  // without its newline counts too. `now` is the time of points whose line has no "time".
  Batch read(bool at_end, double now);

  // Every problem met so far, and the first of them.
  int64_t problems() const { return problem_count_; }
  const std::string& first_problem() const { return first_problem_; }
  // Lines read as records so far.
  int64_t records() const { return records_; }

 private:
  void parse_line(const std::string& line, int64_t number, double now, Batch& out);
  void problem(Batch& out, int64_t line, const std::string& what);

  std::filesystem::path path_;
  uintmax_t offset_ = 0;  // bytes consumed: whole lines only
  int64_t line_ = 0;      // lines consumed
  std::string tail_;      // the last bytes consumed, to notice a file rewritten under us
  std::set<std::string> names_;
  int64_t problem_count_ = 0;
  std::string first_problem_;
  int64_t records_ = 0;
};

}  // namespace precon::orch
