#include "orchestrator/sched/metrics_follower.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace precon::orch {

namespace {

constexpr size_t kTailCheck = 64;

std::string shortened(const std::string& s) { return s.size() > 60 ? s.substr(0, 60) + "..." : s; }

bool metric_name_ok(const std::string& name) {
  return !name.empty() && name.size() <= 128 &&
         std::all_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; });
}

}  // namespace

void MetricsFollower::problem(Batch& out, int64_t line, const std::string& what) {
  std::string text = path_.filename().string() + " line " + std::to_string(line) + ": " + what;
  if (problem_count_++ == 0) first_problem_ = text;
  out.problems.push_back(std::move(text));
}

void MetricsFollower::parse_line(const std::string& line, int64_t number, double now, Batch& out) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;  // a blank line says nothing
  if (line.size() > kMaxLine) {
    problem(out, number, "longer than " + std::to_string(kMaxLine) + " bytes; skipped");
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) {
    problem(out, number, "not a JSON object (\"" + shortened(line) + "\"); skipped");
    return;
  }
  const nlohmann::json step = j.value("step", nlohmann::json());
  const bool step_ok = (step.is_number_unsigned() && step.get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()}) ||
                       (step.is_number_integer() && step.get<int64_t>() >= 0);
  if (!step_ok) {
    problem(out, number, "needs \"step\": an integer from 0 up, got " + (step.is_null() ? std::string("none") : shortened(step.dump())) +
                             "; skipped");
    return;
  }
  const int64_t s = step.get<int64_t>();
  const nlohmann::json time = j.value("time", nlohmann::json());
  const double t = time.is_number() && std::isfinite(time.get<double>()) ? time.get<double>() : now;
  bool any = false;
  for (const auto& [name, value] : j.items()) {
    if (name == "step" || name == "time") continue;
    if (!metric_name_ok(name)) {
      problem(out, number, "metric name \"" + shortened(name) + "\" is not 1 to 128 printable characters; skipped");
      continue;
    }
    if (!value.is_number() && !value.is_null()) {
      problem(out, number, "\"" + name + "\" is " + shortened(value.dump()) + ", not a number or null; skipped");
      continue;
    }
    if (!names_.count(name)) {
      if (names_.size() >= kMaxNames) {
        problem(out, number, "\"" + name + "\" would be metric name " + std::to_string(kMaxNames + 1) +
                                 " of the trial, more than " + std::to_string(kMaxNames) + "; skipped");
        continue;
      }
      names_.insert(name);
    }
    out.points.push_back({name, s, value.is_null() ? std::nan("") : value.get<double>(), t});
    any = true;
  }
  if (any) ++records_;
  else if (j.size() <= 2) problem(out, number, "a record without metrics; skipped");
}

MetricsFollower::Batch MetricsFollower::read(bool at_end, double now) {
  Batch out;
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) return out;
  const uintmax_t size = static_cast<uintmax_t>(in.tellg());
  // Cut back, or rewritten with other bytes where the last read ended: read it again from its start.
  bool same = size >= offset_;
  if (same && !tail_.empty()) {
    std::string check(tail_.size(), '\0');
    in.seekg(static_cast<std::streamoff>(offset_ - tail_.size()));
    same = static_cast<bool>(in.read(check.data(), static_cast<std::streamsize>(check.size()))) && check == tail_;
  }
  if (!same) {
    offset_ = 0;
    line_ = 0;
    tail_.clear();
  }
  if (size <= offset_) return out;
  const uintmax_t want = std::min<uintmax_t>(size - offset_, kMaxRead);
  std::string text(static_cast<size_t>(want), '\0');
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset_));
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) return out;
  size_t end = text.rfind('\n');
  end = end == std::string::npos ? 0 : end + 1;
  // A last line without its newline counts once the program has ended; a line longer than a
  // whole read is skipped in pieces.
  if (at_end && want == size - offset_) end = text.size();
  else if (end == 0 && text.size() == kMaxRead) end = text.size();
  for (size_t begin = 0; begin < end;) {
    size_t nl = text.find('\n', begin);
    if (nl == std::string::npos || nl >= end) nl = end;
    parse_line(text.substr(begin, nl - begin), ++line_, now, out);
    begin = nl + 1;
  }
  offset_ += end;
  const size_t keep = std::min<size_t>(end, kTailCheck);
  tail_ = text.substr(end - keep, keep);
  return out;
}

}  // namespace precon::orch
