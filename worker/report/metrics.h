// Metric records and the run directory's metrics.jsonl, the source of truth for a run's
// metrics (the controller's copy is best effort and catches up; this file never waits on it).
//
// Format: one flat JSON object per line, {"step": N, "time": T, "<name>": value, ...},
// in push order; `time` is unix seconds with a fraction; non-finite values are null.
// Thread-safety: a MetricsWriter is used by one thread; format_metric_record is reentrant.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "worker/common/error.h"

namespace precon::worker {

// Bad reporting input or configuration: a reserved metric name, an unusable controller URL.
class ReportError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

// One line of metrics: every value measured at `step`.
struct MetricRecord {
  int64_t step = 0;                                   // optimizer step the values belong to
  double time = 0.0;                                  // wall clock, unix seconds (fractional)
  std::vector<std::pair<std::string, double>> values; // name → value; "step"/"time" are reserved
};

// Unix time now, in seconds with a fraction (for MetricRecord::time).
double unix_seconds_now();

// The record as one JSON line without the newline. Throws ReportError for an empty or
// reserved name ("step", "time"), since it would collide with the line's own keys.
std::string format_metric_record(const MetricRecord& record);

// Appends records to a metrics.jsonl file. Each line is handed to the kernel as it is
// written (a crash loses at most the line being written); sync() makes them durable.
class MetricsWriter {
 public:
  // Opens `path` for appending, creating it if needed. An existing file belongs to a run
  // being resumed from a checkpoint at `resume_step`: records after it (step > resume_step)
  // will be recomputed, so they are cut off, together with a torn or unparsable tail left by a
  // crash. Pass -1 to start with an empty file. Throws IoError.
  MetricsWriter(const std::filesystem::path& path, int64_t resume_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends one line. Throws ReportError (bad name) or IoError (e.g. disk full).
  void write(const MetricRecord& record);
  // fsync: called at checkpoints so the file is at least as durable as the checkpoint.
  void sync();

  const std::filesystem::path& path() const { return path_; }
  // Lines cut off when opening (records after resume_step, plus a torn tail).
  int64_t truncated_lines() const { return truncated_lines_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t truncated_lines_ = 0;
};

}  // namespace precon::worker
