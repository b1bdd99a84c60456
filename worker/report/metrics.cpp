#include "worker/report/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include <nlohmann/json.hpp>

#include "worker/common/file_io.h"

namespace precon::worker {

namespace {

[[noreturn]] void throw_io(const char* op, const std::filesystem::path& path, int err) {
  throw IoError(errno_text(op, path, err), err);
}

// A line we wrote: a JSON object whose "step" is an integer. Anything else is debris.
bool parse_step(std::string_view line, int64_t& step) {
  const auto json = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return false;
  const auto it = json.find("step");
  if (it == json.end() || !it->is_number_integer()) return false;
  step = it->get<int64_t>();
  return true;
}

// Where to cut the file so that it ends after the last record with step <= resume_step.
// Steps only grow within a file (each resume cuts before appending), so scanning back from the
// end touches only the lines being dropped, not the whole history of a long run.
size_t resume_cut(std::string_view text, int64_t resume_step, int64_t& dropped_lines) {
  size_t end = text.size();
  if (end > 0 && text[end - 1] != '\n') {  // torn last line: the crash came mid-write
    const size_t nl = text.rfind('\n');
    end = nl == std::string_view::npos ? 0 : nl + 1;
    ++dropped_lines;
  }
  while (end > 0) {
    const size_t prev_nl = end >= 2 ? text.rfind('\n', end - 2) : std::string_view::npos;
    const size_t start = prev_nl == std::string_view::npos ? 0 : prev_nl + 1;
    int64_t step = 0;
    if (parse_step(text.substr(start, end - 1 - start), step) && step <= resume_step) break;
    end = start;
    ++dropped_lines;
  }
  return end;
}

void write_all(int fd, const std::filesystem::path& path, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io("write", path, errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

double unix_seconds_now() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(now).count();
}

std::string format_metric_record(const MetricRecord& record) {
  // Built by hand to keep step and time first and names in push order; nlohmann's dump gives
  // round-trip doubles, null for NaN/Inf, and escapes names.
  std::string line = "{\"step\": " + std::to_string(record.step) + ", \"time\": " + nlohmann::json(record.time).dump();
  for (const auto& [name, value] : record.values) {
    if (name.empty() || name == "step" || name == "time") {
      throw ReportError("metric name \"" + name + "\" at step " + std::to_string(record.step) +
                        " is empty or reserved (\"step\" and \"time\" are the record's own keys); rename the metric");
    }
    line += ", ";
    line += nlohmann::json(name).dump();
    line += ": ";
    line += nlohmann::json(value).dump();
  }
  line += '}';
  return line;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& path, int64_t resume_step) : path_(path) {
  int flags = O_WRONLY | O_CREAT | O_APPEND;
  if (resume_step < 0) flags |= O_TRUNC;
  // A link planted at metrics.jsonl must not send the records elsewhere, nor a FIFO hang the run.
  fd_ = open_run_file(path, flags, 0644);
  if (fd_ < 0) throw_io(errno == ENXIO ? "open (not a regular file)" : "open", path, errno);
  if (resume_step < 0) return;
  try {
    const MappedFile existing(path);
    const std::string_view text(reinterpret_cast<const char*>(existing.bytes().data()), existing.size());
    const size_t cut = resume_cut(text, resume_step, truncated_lines_);
    if (cut < text.size()) {
      if (::ftruncate(fd_, static_cast<off_t>(cut)) != 0) throw_io("truncate", path, errno);
      sync();
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const MetricRecord& record) {
  std::string line = format_metric_record(record);
  line += '\n';
  write_all(fd_, path_, line);
}

void MetricsWriter::sync() {
  if (::fsync(fd_) != 0) throw_io("fsync", path_, errno);
}

}  // namespace precon::worker
