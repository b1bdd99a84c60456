#include "orchestrator/exec/oom.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "worker/model/memory_estimate.h"

namespace precon::orch {

namespace {

double read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  return end && *end == '\0' && v < 1e18 ? v : -1;  // v1 says "no limit" with 2^63 rounded to a page
}

long long read_key(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  long long v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return -1;
}

}  // namespace

MemoryCgroupView own_memory_cgroup(const std::string& root) {
  MemoryCgroupView view;
  std::ifstream in(root + "/proc/self/cgroup");
  std::string v2_path, v1_path;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(b + 1);
    else if (controllers.find(",memory,") != std::string::npos) v1_path = line.substr(b + 1);
  }
  auto dir_of = [](const std::string& base, const std::string& path) { return base + (path == "/" ? "" : path); };
  const std::string v2_dir = dir_of(root + "/sys/fs/cgroup", v2_path);
  if (!v2_path.empty() && access((v2_dir + "/memory.events").c_str(), R_OK) == 0) {
    view.dir = v2_dir;
    view.v2 = true;
  } else if (!v1_path.empty()) {
    const std::string v1_dir = dir_of(root + "/sys/fs/cgroup/memory", v1_path);
    if (access((v1_dir + "/memory.oom_control").c_str(), R_OK) == 0) view.dir = v1_dir;
  }
  if (view.dir.empty()) return view;
  view.oom_kills = cgroup_oom_kills(view);
  view.limit = read_number(view.dir + (view.v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  return view;
}

long long cgroup_oom_kills(const MemoryCgroupView& c) {
  if (c.dir.empty()) return -1;
  return read_key(c.dir + (c.v2 ? "/memory.events" : "/memory.oom_control"), "oom_kill");
}

std::string kernel_oom_record(pid_t pid, const std::string& kmsg_path) {
  // Each read() of /dev/kmsg returns one record "prio,seq,usec,flags;text"; non-blocking, the
  // read after the last one fails with EAGAIN. Records that were overwritten meanwhile: EPIPE.
  const int fd = ::open(kmsg_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  const std::string killed = "Killed process " + std::to_string(pid) + " ";
  const std::string named = ",pid=" + std::to_string(pid) + ",";
  std::string found;
  char buf[8192];
  for (int records = 0; records < 1000000; ++records) {
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    if (n < 0 && errno == EPIPE) continue;
    if (n <= 0) break;
    std::string record(buf, static_cast<size_t>(n));
    const size_t semi = record.find(';');
    std::string text = semi == std::string::npos ? record : record.substr(semi + 1);
    if (const size_t nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
    if (text.find(killed) != std::string::npos ||
        (text.rfind("oom-kill:", 0) == 0 && text.find(named) != std::string::npos))
      found = text.size() > 300 ? text.substr(0, 300) : text;
  }
  ::close(fd);
  return found;
}

double memory_total_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    double kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return -1;
}

ExitStatus judge_oom(const OomEvidence& e) {
  // A SIGKILL, or a launcher (mpirun) reporting that a rank died of one (128 + 9).
  const bool sigkill = (e.status.kind == ExitKind::killed && e.status.signal == SIGKILL) ||
                       (e.status.kind == ExitKind::failed && e.status.code == 128 + SIGKILL);
  if (!sigkill) return e.status;
  std::string evidence;
  if (e.oom_kills_before >= 0 && e.oom_kills_after > e.oom_kills_before)
    evidence = "the memory cgroup counted " + std::to_string(e.oom_kills_after - e.oom_kills_before) +
               " out-of-memory kill(s) while it ran";
  else if (!e.kernel_record.empty())
    evidence = "the kernel's log: \"" + e.kernel_record + "\"";
  else if (e.peak_rss > 0 && e.limit > 0 && e.peak_rss >= 0.9 * e.limit)
    evidence = "SIGKILL with its peak resident memory within 10 % of the limit";
  if (evidence.empty()) return e.status;
  ExitStatus s = e.status;
  s.kind = ExitKind::out_of_memory;
  s.detail = "killed by the out-of-memory killer (peak resident memory " +
             (e.peak_rss > 0 ? worker::bytes_text(e.peak_rss) : std::string("unknown")) + ", limit " +
             (e.limit > 0 ? worker::bytes_text(e.limit) + " (" + e.limit_source + ")" : std::string("unknown")) + "; " +
             evidence + "); not retried: the same run needs the same memory: shrink the model, "
             "train.micro_batch_size or model.seq_len, or give it more memory";
  return s;
}

}  // namespace precon::orch
