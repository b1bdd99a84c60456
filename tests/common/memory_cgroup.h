// A memory cgroup of the tests' own, with a small limit, for the runs that must meet one (the
// trainer's pre-check, the executors' report of an out-of-memory kill): cgroup v2 where
// /sys/fs/cgroup is the unified hierarchy with the memory controller, else v1's memory controller
// at /sys/fs/cgroup/memory. Creating one needs root and a writable hierarchy; where that is not
// possible `reason()` says why and the test skips. Removed (after its processes ended) on destruction.
#pragma once

#include <string>

namespace precon::test {

class MemoryCgroup {
 public:
  explicit MemoryCgroup(const std::string& name, long long limit_bytes);
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  bool ok() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }  // why it could not be made
  const std::string& dir() const { return dir_; }
  bool v2() const { return v2_; }
  // A shell prefix that moves the shell into the cgroup before `exec`ing the rest of the command:
  // "sh -c 'echo $$ > DIR/cgroup.procs && exec \"$0\" \"$@\"' ".
  std::string enter() const;
  // The kills its out-of-memory killer made (v2 memory.events oom_kill, v1 memory.oom_control oom_kill).
  long long oom_kills() const;

 private:
  std::string dir_, reason_;
  bool v2_ = false;
};

}  // namespace precon::test
