#include "tests/common/memory_cgroup.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

namespace precon::test {

namespace {

bool write_file(const std::string& path, const std::string& text, std::string& why) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (out) return true;
  why = "cannot write " + text + " to " + path + " (" + std::strerror(errno) + ")";
  return false;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

MemoryCgroup::MemoryCgroup(const std::string& name, long long limit_bytes) {
  const std::string unique = name + "-" + std::to_string(getpid());
  struct statfs fs {};
  if (statfs("/sys/fs/cgroup", &fs) == 0 && static_cast<long>(fs.f_type) == CGROUP2_SUPER_MAGIC &&
      read_text("/sys/fs/cgroup/cgroup.controllers").find("memory") != std::string::npos) {
    v2_ = true;
    dir_ = "/sys/fs/cgroup/" + unique;
  } else if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0) {
    dir_ = "/sys/fs/cgroup/memory/" + unique;
  } else {
    reason_ = "no cgroup memory controller here (neither cgroup v2 at /sys/fs/cgroup nor v1 at /sys/fs/cgroup/memory)";
    return;
  }
  if (v2_) {
    std::string ignored;  // already enabled, or refused: the child's memory.max says which
    write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory", ignored);
  }
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    reason_ = "cannot create the cgroup " + dir_ + " (" + std::strerror(errno) + ")";
    dir_.clear();
    return;
  }
  const std::string limit = std::to_string(limit_bytes);
  if (!write_file(dir_ + (v2_ ? "/memory.max" : "/memory.limit_in_bytes"), limit, reason_)) return;
  // No swap to hide in (v1 without swap accounting has no memsw file: then the limit alone).
  std::string ignored;
  if (v2_) write_file(dir_ + "/memory.swap.max", "0", ignored);
  else write_file(dir_ + "/memory.memsw.limit_in_bytes", limit, ignored);
}

MemoryCgroup::~MemoryCgroup() {
  if (dir_.empty()) return;
  // The kernel removes the cgroup only once its last process has gone (a killed one is reaped by now).
  for (int i = 0; i < 50 && rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::string MemoryCgroup::enter() const {
  return "sh -c 'echo $$ > " + dir_ + "/cgroup.procs && exec \"$0\" \"$@\"' ";
}

long long MemoryCgroup::oom_kills() const {
  std::istringstream in(read_text(dir_ + (v2_ ? "/memory.events" : "/memory.oom_control")));
  std::string key;
  long long value = 0;
  while (in >> key >> value)
    if (key == "oom_kill") return value;
  return 0;
}

}  // namespace precon::test
