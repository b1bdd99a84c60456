#include "worker/train/memory_check.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kernels/backend.h"
#include "worker/model/memory_estimate.h"

namespace precon::worker {

namespace {

// A cgroup file's number; -1 when absent, unreadable, "max", or so large it means no limit (v1
// writes 2^63 rounded down to a page).
double read_limit(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  return end && *end == '\0' && v < 1e18 ? v : -1;
}

// The cgroup directories of this process (v2 first, then v1's memory controller), the process's
// own first and then each one above it.
std::vector<std::pair<std::string, std::string>> cgroup_chain(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> dirs;  // (directory, "v1" | "v2")
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    // "0::/path" (v2), "7:memory:/path" or "4:cpu,memory:/path" (v1)
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    std::string base, kind;
    if (line.rfind("0::", 0) == 0) {
      base = root + "/sys/fs/cgroup";
      kind = "v2";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      base = root + "/sys/fs/cgroup/memory";
      kind = "v1";
    } else {
      continue;
    }
    while (true) {
      dirs.emplace_back(base + (path == "/" ? std::string() : path), kind);
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return dirs;
}

}  // namespace

MemoryRoom host_memory_room(const std::string& root) {
  MemoryRoom room;
  std::ifstream meminfo(root + "/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    double kib = 0;
    if (fields >> kib) {
      room.bytes = kib * 1024;
      room.source = "MemAvailable in /proc/meminfo";
    }
  }
  const size_t strip = root.size();
  for (const auto& [dir, kind] : cgroup_chain(root)) {
    const bool v2 = kind == "v2";
    const double limit = read_limit(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (limit < 0) continue;
    const double used = std::max(0.0, read_limit(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")));
    if (room.bytes >= 0 && limit - used >= room.bytes) continue;
    room.bytes = std::max(0.0, limit - used);
    room.source = "cgroup " + dir.substr(strip) + ": " + (v2 ? "memory.max " : "memory.limit_in_bytes ") +
                  bytes_text(limit) + ", " + bytes_text(used) + " in use";
  }
  return room;
}

std::string memory_problem(const TrialConfig& c, kernels::Device device) {
  if (!c.train.memory_check) return "";
  const MemoryEstimate e = estimate_memory(c);
  double need = e.bytes_per_rank;
  MemoryRoom room;
  std::string where;
  if (device == kernels::Device::cuda) {
    room.bytes = kernels::device_free_bytes(device);
    room.source = "free on this rank's GPU (cudaMemGetInfo)";
    where = "this rank's GPU";
  } else {
    // The ranks of one node share its memory (the launcher says how many run here).
    int local = 1;
    if (const char* n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(n));
    else if (const char* s = std::getenv("SLURM_STEP_TASKS_PER_NODE")) local = std::max(1, std::atoi(s));
    need *= local;
    room = host_memory_room();
    where = local > 1 ? "the " + std::to_string(local) + " ranks on this node" : "this process";
  }
  if (room.bytes < 0 || need <= room.bytes) return "";
  return "the run needs about " + bytes_text(need) + " for " + where + " (per rank: " + estimate_text(e) +
                        ") but only " + bytes_text(room.bytes) + " is available (" + room.source +
                        "): shrink the model, train.micro_batch_size or model.seq_len, spread it with "
                        "parallel.tensor / parallel.pipeline, or set train.memory_check = false to start anyway";
}

}  // namespace precon::worker
