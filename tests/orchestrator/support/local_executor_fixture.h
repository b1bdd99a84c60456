// The local executor's tests' fixture: a run directory per test, the test process a subreaper
// (so that the grandchildren a killed attempt leaves are reaped, not left to an init that may not
// reap), launches whose process groups are killed and reaped when the test ends, and polling
// helpers. Used by tests/orchestrator/exec/test_local_executor_*.cpp.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "orchestrator/exec/local_executor.h"

namespace precon::orch::exec_testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void touch(const fs::path& p) { std::ofstream(p) << "x"; }

inline LocalExecutorOptions slots(int cpus, std::vector<int> gpu_ids = {}) {
  LocalExecutorOptions o;
  o.cpu_slots = cpus;
  o.gpu_ids = std::move(gpu_ids);
  return o;
}

inline pid_t pid_of(const Handle& h) { return static_cast<pid_t>(std::stol(h.external_id.substr(0, h.external_id.find(':')))); }

// Running (not a zombie) according to /proc.
inline bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  size_t close = line.rfind(')');
  char state = close + 2 < line.size() ? line[close + 2] : 'X';
  return state != 'Z' && state != 'X';
}

// A child of this process that has exited and can be waited for, not yet reaped. (Under
// ThreadSanitizer a fork has a runtime thread of its own, and /proc shows the leader a zombie
// before the last thread is gone and waitid reports the exit.)
inline bool waitable(pid_t pid) {
  siginfo_t si{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0;
}

template <class Pred>
bool wait_until(Pred pred, double seconds = 5.0) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

inline pid_t read_pid_file(const fs::path& p) {
  pid_t pid = 0;
  EXPECT_TRUE(wait_until([&] { return fs::exists(p) && fs::file_size(p) > 0; })) << p;
  std::ifstream(p) >> pid;
  return pid;
}

class LocalExecutorTest : public ::testing::Test {
 protected:
  // The test process adopts orphans (the grandchildren an attempt leaves when it is killed),
  // so that TearDown can reap them instead of leaving zombies to an init that may not reap.
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("precon_exec_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  }

  // Kills whatever a failed test left running, then reaps every child; a child still running
  // two seconds later is a stray process and fails the test.
  void TearDown() override {
    for (pid_t pid : pids_) {
      siginfo_t si{};
      bool ours = ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0;
      if (ours || alive(pid)) ::killpg(pid, SIGKILL);
    }
    for (pid_t pid : extra_pids_) {
      if (alive(pid)) ::kill(pid, SIGKILL);
    }
    auto deadline = Clock::now() + std::chrono::seconds(2);
    while (true) {
      pid_t r = ::waitpid(-1, nullptr, WNOHANG);
      if (r > 0) continue;
      if (r < 0 && errno != EINTR) break;  // ECHILD: nothing left
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "child processes still running after the test";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
    fs::remove_all(dir_);
  }

  LaunchSpec spec(const std::string& name, std::vector<std::string> argv, int cpus = 1, int gpus = 0) {
    LaunchSpec s;
    s.trial_id = ++next_trial_;
    s.attempt = 1;
    s.label = name;
    s.run_dir = dir_ / name;
    s.argv = std::move(argv);
    s.cpus = cpus;
    s.gpus = gpus;
    return s;
  }

  LaunchSpec sh(const std::string& name, const std::string& script, int cpus = 1, int gpus = 0) {
    return spec(name, {"/bin/sh", "-c", script}, cpus, gpus);
  }

  Handle launch(Executor& ex, const LaunchSpec& s) {
    Handle h = ex.launch(s);
    pids_.push_back(pid_of(h));
    return h;
  }

  // Polls until `h` is reported; other attempts' reports are kept for their own wait.
  ExitStatus wait_exit(Executor& ex, const Handle& h, double seconds = 5.0) {
    auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (true) {
      for (auto& [handle, status] : ex.poll()) done_[handle.external_id] = status;
      auto it = done_.find(h.external_id);
      if (it != done_.end()) return it->second;
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "attempt " << h.external_id << " not reported within " << seconds << " s";
        return ExitStatus{};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  ExitStatus run_sh(Executor& ex, const std::string& name, const std::string& script) {
    return wait_exit(ex, launch(ex, sh(name, script)));
  }

  fs::path dir_;
  std::vector<pid_t> pids_;        // wrappers (process group leaders) launched by the test
  std::vector<pid_t> extra_pids_;  // grandchildren whose pids the scripts wrote out
  std::map<std::string, ExitStatus> done_;
  int64_t next_trial_ = 0;
};

}  // namespace precon::orch::exec_testing
