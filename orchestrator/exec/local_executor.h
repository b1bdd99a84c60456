// The `local` executor: each attempt is a process tree on this machine, in its own process
// group, holding CPU and GPU slots until it ends.
//
// Exit status that survives the controller. An attempt is started as
//   controller ──fork──> wrapper (process group leader, pgid = pid) ──fork+exec──> program
// (wrapped_process.h).
// The wrapper ignores the stop signals, waits for the program and writes its status to
// run_dir/exit_status.<attempt> ("exit N" or "signal N", written to a temporary name and
// renamed), then exits with the same code (128 + signal when killed). The wrapper is a fork of
// the controller that never execs, so between fork and its end it calls only
// async-signal-safe functions on memory prepared before the fork; it shares the controller's
// pages copy-on-write. Because the status is in a file, a controller killed with `kill -9`
// and restarted can adopt() its running attempts (pid + /proc start time guard against pid
// reuse) and still learn how each one ended, so every attempt's end is reported exactly once.
// run_dir/launch.<attempt> records the slots an attempt holds so that adopt() can reserve them,
// and the wrapper appends its own id (wrapper=<pid>:<start ticks>) to it before it starts the
// program. A controller killed after the fork but before it recorded the attempt launches the
// same attempt number again after its restart: launch() then finds that wrapper and takes it
// over (as adopt() would) instead of starting the trainer a second time.
//
// precon-train runs in the controller's working directory (relative paths in argv mean what
// they mean to the controller), a recipe's own program (LaunchSpec::user_program) in its run
// directory; each with stdin from /dev/null and stdout/stderr appended to run_dir/stdout.log and
// run_dir/stderr.log.
//
// Signals: signal_stop() sends SIGTERM and kill() SIGKILL to the whole process group.
// Attempts outlive the executor object and the controller process (they are not its session's
// foreground group, stdin is /dev/null, nothing is sent to them when the parent dies).
// When an attempt's wrapper ends, processes left in its group are killed, so nothing an
// attempt started keeps running after it is reported (for attempts launched by this process).
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "orchestrator/exec/executor.h"
#include "orchestrator/exec/oom.h"
#include "orchestrator/exec/wrapped_process.h"

namespace precon::orch {

struct LocalExecutorOptions {
  int cpu_slots = 0;         // CPU slots; 0 = the CPUs this process may run on
  std::vector<int> gpu_ids;  // CUDA device ids handed out as GPU slots; empty = no GPUs
};

class LocalExecutor : public Executor {
 public:
  explicit LocalExecutor(LocalExecutorOptions options = {});
  // Leaves running attempts running: destroying the executor is what a controller crash does.
  ~LocalExecutor() override;
  LocalExecutor(const LocalExecutor&) = delete;
  LocalExecutor& operator=(const LocalExecutor&) = delete;

  std::string name() const override { return "local"; }
  void validate(const LaunchSpec& spec) const override;
  bool has_capacity(const LaunchSpec& spec) const override;
  Handle launch(const LaunchSpec& spec) override;
  std::vector<std::pair<Handle, ExitStatus>> poll() override;
  void signal_stop(const Handle& h) override;
  void kill(const Handle& h) override;
  std::optional<ExitStatus> adopt(const Handle& h) override;
  size_t running() const override;

  int cpu_slots() const { return cpu_slots_; }
  int free_cpu_slots() const;
  int free_gpu_slots() const;

  // Where the wrapper writes an attempt's exit status: run_dir/exit_status.<attempt>.
  static std::filesystem::path exit_status_path(const std::filesystem::path& run_dir, int64_t attempt);

 private:
  struct Attempt {
    Handle handle;
    pid_t pid = 0;                // wrapper pid = process group id
    unsigned long long start_ticks = 0;
    bool child = false;           // ours to wait for (launched, or adopted by the same process)
    bool killed = false;          // kill() was sent: a missing status file means SIGKILL
    long long oom_kills_before = -1;  // the memory cgroup's oom_kill count at launch (-1: unknown, adopted)
    int cpus = 0;
    std::vector<int> gpus;
  };

  // Non-blocking: the attempt's final status if it has ended (and is then reaped), or nullopt.
  std::optional<ExitStatus> check_ended(Attempt& a);
  // The status read back, or an out-of-memory kill when the evidence says so (oom.h).
  ExitStatus judged(const Attempt& a, const ExitStatus& s, const ExitRecord& record) const;
  // adopt() with mu_ held.
  std::optional<ExitStatus> adopt_locked(const Handle& h);
  // The handle of a wrapper an earlier controller started for this attempt, from the launch
  // record; nullopt when the record names none.
  std::optional<Handle> earlier_launch(const LaunchSpec& spec) const;
  void send(const Handle& h, int sig, bool mark_killed);
  void reserve(Attempt& a, int cpus, const std::vector<int>& gpus);
  void release(const Attempt& a);

  mutable std::mutex mu_;
  int cpu_slots_;
  std::vector<int> gpu_ids_;
  std::vector<bool> gpu_used_;  // parallel to gpu_ids_
  int cpus_used_ = 0;
  std::string hostname_;
  MemoryCgroupView cgroup_;  // this process's memory cgroup, which its attempts run in
  std::vector<Attempt> attempts_;
  std::vector<std::pair<Handle, ExitStatus>> ended_unpolled_;  // taken over by launch() already ended
};

}  // namespace precon::orch
