// The local executor against real processes: exit-code mapping (sh and the real precon-train),
// logs, environment, slots, SIGTERM/SIGKILL to the process group, survival of the controller,
// adoption of attempts after a restart (same process and another process), and an out-of-memory
// kill told from any other SIGKILL (oom.h), with a real one in a small memory cgroup.
#include "orchestrator/exec/local_executor.h"
#include "orchestrator/exec/oom.h"
#include "tests/common/memory_cgroup.h"

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

namespace precon::orch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void touch(const fs::path& p) { std::ofstream(p) << "x"; }

LocalExecutorOptions slots(int cpus, std::vector<int> gpu_ids = {}) {
  LocalExecutorOptions o;
  o.cpu_slots = cpus;
  o.gpu_ids = std::move(gpu_ids);
  return o;
}

pid_t pid_of(const Handle& h) { return static_cast<pid_t>(std::stol(h.external_id.substr(0, h.external_id.find(':')))); }

// Running (not a zombie) according to /proc.
bool alive(pid_t pid) {
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
bool waitable(pid_t pid) {
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

pid_t read_pid_file(const fs::path& p) {
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

TEST(LocalExecutorClassify, MapsTheTrainerExitCodes) {
  EXPECT_EQ(classify_exit(0 << 8).kind, ExitKind::succeeded);
  EXPECT_EQ(classify_exit(1 << 8).kind, ExitKind::failed);
  EXPECT_EQ(classify_exit(2 << 8).kind, ExitKind::usage);
  EXPECT_EQ(classify_exit(75 << 8).kind, ExitKind::requeue);
  EXPECT_EQ(classify_exit(75 << 8).detail, "requeue requested (exit 75)");
  ExitStatus other = classify_exit(137 << 8);
  EXPECT_EQ(other.kind, ExitKind::failed);
  EXPECT_EQ(other.code, 137);
  EXPECT_EQ(other.detail, "exit code 137");
  ExitStatus sig = classify_exit(SIGKILL);
  EXPECT_EQ(sig.kind, ExitKind::killed);
  EXPECT_EQ(sig.code, -1);
  EXPECT_EQ(sig.signal, SIGKILL);
  EXPECT_EQ(sig.detail, "killed by SIGKILL");
}

TEST_F(LocalExecutorTest, ExitCodesOfRealProcessesAreClassified) {
  LocalExecutor ex(slots(8));
  struct Case {
    std::string script;
    ExitKind kind;
    int code, signal;
  };
  const Case cases[] = {{"exit 0", ExitKind::succeeded, 0, 0},     {"exit 1", ExitKind::failed, 1, 0},
                        {"exit 2", ExitKind::usage, 2, 0},         {"exit 75", ExitKind::requeue, 75, 0},
                        {"kill -KILL $$", ExitKind::killed, -1, 9}, {"kill -TERM $$", ExitKind::killed, -1, 15}};
  std::vector<Handle> handles;
  for (size_t i = 0; i < std::size(cases); ++i) {
    handles.push_back(launch(ex, sh("case" + std::to_string(i), cases[i].script)));
  }
  for (size_t i = 0; i < std::size(cases); ++i) {
    ExitStatus s = wait_exit(ex, handles[i]);
    EXPECT_EQ(s.kind, cases[i].kind) << cases[i].script << ": " << s.detail;
    EXPECT_EQ(s.code, cases[i].code) << cases[i].script;
    EXPECT_EQ(s.signal, cases[i].signal) << cases[i].script;
    // The status, then the program's pid and peak resident memory.
    EXPECT_EQ(read_text(LocalExecutor::exit_status_path(handles[i].run_dir, 1)).rfind(
                  cases[i].signal ? "signal " + std::to_string(cases[i].signal) + "\npid "
                                  : "exit " + std::to_string(cases[i].code) + "\npid ",
                  0),
              0u);
  }
  EXPECT_EQ(ex.running(), 0u);
  EXPECT_TRUE(ex.poll().empty());
  for (const char* prog : {"/bin/true", "/bin/false"}) {
    ExitStatus s = wait_exit(ex, launch(ex, spec(fs::path(prog).filename(), {prog})));
    EXPECT_EQ(s.kind, std::string(prog) == "/bin/true" ? ExitKind::succeeded : ExitKind::failed) << prog;
  }
}

TEST(OutOfMemory, OnlyASigkillWithEvidenceIsAnOutOfMemoryKill) {
  OomEvidence e;
  e.status = classify_exit(SIGKILL);
  e.peak_rss = 900.0 * (1 << 20);
  e.limit = 1024.0 * (1 << 20);
  e.limit_source = "cgroup memory.max";
  // Peak within 10 % of the limit: an out-of-memory kill, with both numbers in the reason.
  e.peak_rss = 950.0 * (1 << 20);
  ExitStatus s = judge_oom(e);
  EXPECT_EQ(s.kind, ExitKind::out_of_memory);
  EXPECT_EQ(s.detail.rfind("killed by the out-of-memory killer (peak resident memory 950.0 MiB, limit 1.0 GiB", 0), 0u)
      << s.detail;
  // Far below it, with no record: a SIGKILL like any other (someone's kill -9), retried as before.
  e.peak_rss = 100.0 * (1 << 20);
  EXPECT_EQ(judge_oom(e).kind, ExitKind::killed);
  // The cgroup's count rose, or the kernel named the pid: out of memory whatever the peak.
  e.oom_kills_before = 3;
  e.oom_kills_after = 4;
  EXPECT_EQ(judge_oom(e).kind, ExitKind::out_of_memory);
  e.oom_kills_after = 3;
  e.kernel_record = "Out of memory: Killed process 4242 (precon-train)";
  EXPECT_NE(judge_oom(e).detail.find("Killed process 4242"), std::string::npos);
  // mpirun's exit for a rank that died of SIGKILL counts; an exit 1 or a SIGTERM never does.
  e.status = classify_exit(137 << 8);
  EXPECT_EQ(judge_oom(e).kind, ExitKind::out_of_memory);
  e.status = classify_exit(1 << 8);
  EXPECT_EQ(judge_oom(e).kind, ExitKind::failed);
  e.status = classify_exit(SIGTERM);
  EXPECT_EQ(judge_oom(e).kind, ExitKind::killed);
}

TEST_F(LocalExecutorTest, ARealOutOfMemoryKillIsReportedAsSuch) {
  // A program in a 32 MiB cgroup that writes 256 MiB: the cgroup's out-of-memory killer ends it, and
  // the kernel's log names its pid (the executor's own cgroup has no limit here).
  test::MemoryCgroup cgroup("precon-oom", 32LL << 20);
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.reason();
  const int kmsg = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK);
  if (kmsg < 0) GTEST_SKIP() << "/dev/kmsg cannot be read here: the kernel's record of the kill is not visible";
  ::close(kmsg);
  LocalExecutor ex(slots(2));
  const ExitStatus s = run_sh(ex, "oom", "echo $$ > " + cgroup.dir() + "/cgroup.procs && exec " PRECON_PYTHON
                                         " -c \"s = 'x' * (256 << 20)\"");
  EXPECT_EQ(s.kind, ExitKind::out_of_memory) << s.detail;
  EXPECT_EQ(s.signal, SIGKILL);
  EXPECT_EQ(s.detail.rfind("killed by the out-of-memory killer (peak resident memory ", 0), 0u) << s.detail;
  EXPECT_NE(s.detail.find("Killed process"), std::string::npos) << s.detail;
  EXPECT_GE(cgroup.oom_kills(), 1);
  // The same program under no limit runs to the end.
  EXPECT_EQ(run_sh(ex, "fits", "exec " PRECON_PYTHON " -c \"s = 'x' * (1 << 20)\"").kind, ExitKind::succeeded);
}

TEST_F(LocalExecutorTest, RealTrainerWithMissingConfigIsUsage) {
  LocalExecutor ex(slots(2));
  LaunchSpec s = spec("trainer", {PRECON_TRAIN_BIN, "--config", "/nonexistent/trial.toml", "--run-dir", ""});
  s.argv.back() = s.run_dir.string();
  Handle h = launch(ex, s);
  EXPECT_EQ(h.executor, "local");
  EXPECT_EQ(h.trial_id, s.trial_id);
  EXPECT_EQ(h.attempt, 1);
  ExitStatus st = wait_exit(ex, h, 10.0);
  EXPECT_EQ(st.kind, ExitKind::usage) << st.detail;
  EXPECT_EQ(st.code, 2);
  EXPECT_NE(read_text(s.run_dir / "stderr.log").find("/nonexistent/trial.toml"), std::string::npos);
  // The trainer's own error line is what a failed trial's reason quotes.
  const std::string message = trainer_error_message(s.run_dir);
  EXPECT_NE(message.find("/nonexistent/trial.toml"), std::string::npos) << message;
  EXPECT_EQ(message.find("precon-train:"), std::string::npos) << message;
}

TEST(TrainerErrorMessage, LastErrorLineOfThisAttempt) {
  const fs::path dir = fs::temp_directory_path() / ("precon_trainer_error_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_EQ(trainer_stderr_path(dir), dir / "stderr.log");
  EXPECT_EQ(trainer_error_message(dir), "");  // no log at all
  const std::string first =
      "step 1 loss 4.1\nprecon-train: error: non-finite training loss (nan) at step 3\nprecon-train: resumed\n";
  std::ofstream(trainer_stderr_path(dir)) << first;
  EXPECT_EQ(trainer_error_message(dir), "non-finite training loss (nan) at step 3");
  // A second attempt appends: only its own lines count from its offset, and the last error wins;
  // a launcher's rank prefix and a CR are dropped.
  std::ofstream(trainer_stderr_path(dir), std::ios::app)
      << "0: precon-train: config error: t.toml:3: optimizer.muon.ns_steps: must be >= 1\n"
      << "0: precon-train: config error: optimizer.muon.ns_steps must be >= 1\r\n";
  EXPECT_EQ(trainer_error_message(dir, first.size()), "optimizer.muon.ns_steps must be >= 1");
  EXPECT_EQ(trainer_error_message(dir, fs::file_size(trainer_stderr_path(dir))), "");  // nothing new
  // A long log is read from its tail.
  {
    std::ofstream out(trainer_stderr_path(dir), std::ios::app);
    for (int i = 0; i < 20000; ++i) out << "step " << i << " loss 3.0\n";
    out << "precon-train: error: cannot write checkpoint step_00000040: No space left on device\n";
  }
  EXPECT_EQ(trainer_error_message(dir, first.size()), "cannot write checkpoint step_00000040: No space left on device");
  fs::remove_all(dir);
}

TEST(LauncherRankDeaths, WhichRankDiedOfWhichSignalFromMpirunAndSrun) {
  const fs::path dir = fs::temp_directory_path() / ("precon_rank_deaths_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_EQ(launcher_rank_deaths(dir), "");  // no log at all
  const std::string first = "srun: error: n1: task 0: Exited with exit code 1\n";  // an exit, not a signal
  std::ofstream(trainer_stderr_path(dir)) << first;
  EXPECT_EQ(launcher_rank_deaths(dir), "");
  std::ofstream(trainer_stderr_path(dir), std::ios::app)
      << "--------------------------------------------------------------------------\n"
      << "mpirun noticed that process rank 1 with PID 4242 on node host1 exited on signal 9 (Killed).\n"
      << "srun: error: n2: tasks 2-3: Segmentation fault\r\n"
      << "srun: error: n2: task 4: Killed\n";
  EXPECT_EQ(launcher_rank_deaths(dir, first.size()),
            "rank 1 (on host1) killed by SIGKILL (signal 9); ranks 2-3 (on n2) killed by SIGSEGV (signal 11); "
            "rank 4 (on n2) killed by SIGKILL (signal 9)");
  // Lines before this attempt's offset are an earlier attempt's.
  EXPECT_EQ(launcher_rank_deaths(dir, fs::file_size(trainer_stderr_path(dir))), "");
  fs::remove_all(dir);
}

TEST_F(LocalExecutorTest, LogsGoToRunDirAndAppendAcrossAttempts) {
  LocalExecutor ex(slots(2));
  LaunchSpec s = sh("logs", R"(echo "out $0"; echo "err $0" >&2; read x; echo "stdin=[$x] rc=$?")");
  s.argv.push_back("first");
  EXPECT_EQ(wait_exit(ex, launch(ex, s)).kind, ExitKind::succeeded);
  s.attempt = 2;
  s.argv.back() = "second";
  EXPECT_EQ(wait_exit(ex, launch(ex, s)).kind, ExitKind::succeeded);
  EXPECT_EQ(read_text(s.run_dir / "stdout.log"), "out first\nstdin=[] rc=1\nout second\nstdin=[] rc=1\n");
  EXPECT_EQ(read_text(s.run_dir / "stderr.log"), "err first\nerr second\n");
  EXPECT_TRUE(fs::exists(LocalExecutor::exit_status_path(s.run_dir, 1)));
  EXPECT_TRUE(fs::exists(LocalExecutor::exit_status_path(s.run_dir, 2)));
}

TEST_F(LocalExecutorTest, EnvironmentThreadsAndGpusArePassed) {
  ::setenv("PRECON_EXEC_TEST_INHERITED", "from-controller", 1);
  LocalExecutor ex(slots(8, {3, 5}));
  const std::string script =
      R"(echo "$PRECON_EXEC_TEST_INHERITED|$PRECON_EXEC_TEST_VAR|$OMP_NUM_THREADS|${CUDA_VISIBLE_DEVICES-unset}")";
  LaunchSpec a = spec("a", {"sh", "-c", script + "; sleep 30"}, 2, 1);  // a bare name is looked up in PATH
  a.env["PRECON_EXEC_TEST_VAR"] = "hello world";
  a.env["OMP_NUM_THREADS"] = "99";  // follows the slots, whatever the spec says
  Handle ha = launch(ex, a);
  LaunchSpec b = sh("b", script, 3, 1);
  EXPECT_EQ(wait_exit(ex, launch(ex, b)).kind, ExitKind::succeeded);
  LaunchSpec c = sh("c", script, 1, 0);
  EXPECT_EQ(wait_exit(ex, launch(ex, c)).kind, ExitKind::succeeded);
  ASSERT_TRUE(wait_until([&] { return !read_text(a.run_dir / "stdout.log").empty(); }));
  EXPECT_EQ(read_text(a.run_dir / "stdout.log"), "from-controller|hello world|2|3\n");
  EXPECT_EQ(read_text(b.run_dir / "stdout.log"), "from-controller||3|5\n");
  EXPECT_EQ(read_text(c.run_dir / "stdout.log"), "from-controller||1|\n");  // GPUs exist: none visible

  LocalExecutor no_gpus(slots(1));
  ::setenv("CUDA_VISIBLE_DEVICES", "7", 1);
  LaunchSpec d = sh("d", script);
  EXPECT_EQ(wait_exit(no_gpus, launch(no_gpus, d)).kind, ExitKind::succeeded);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::unsetenv("PRECON_EXEC_TEST_INHERITED");
  EXPECT_EQ(read_text(d.run_dir / "stdout.log"), "from-controller||1|7\n");  // no GPU slots: left alone
  ex.kill(ha);
  EXPECT_EQ(wait_exit(ex, ha).kind, ExitKind::killed);
}

TEST_F(LocalExecutorTest, SlotsAreReservedAtLaunchAndReleasedWhenReaped) {
  LocalExecutor ex(slots(3, {0}));
  EXPECT_EQ(ex.cpu_slots(), 3);
  EXPECT_THROW(ex.validate(sh("too_many_cpus", "true", 4)), ExecError);
  EXPECT_THROW(ex.validate(sh("too_many_gpus", "true", 1, 2)), ExecError);
  EXPECT_THROW(ex.validate(sh("zero_cpus", "true", 0)), ExecError);
  try {
    ex.validate(sh("too_many_gpus", "true", 1, 2));
  } catch (const ExecError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2 GPUs but the local executor has 1"), std::string::npos) << e.what();
  }

  Handle big = launch(ex, sh("big", "sleep 30", 2));
  EXPECT_EQ(ex.free_cpu_slots(), 1);
  EXPECT_FALSE(ex.has_capacity(sh("x", "true", 2)));
  EXPECT_TRUE(ex.has_capacity(sh("x", "true", 1, 1)));
  Handle gpu = launch(ex, sh("gpu", "sleep 30", 1, 1));
  EXPECT_EQ(ex.free_cpu_slots(), 0);
  EXPECT_EQ(ex.free_gpu_slots(), 0);
  EXPECT_FALSE(ex.has_capacity(sh("x", "true", 1)));
  EXPECT_THROW(ex.launch(sh("x", "true", 1)), ExecError);
  EXPECT_EQ(ex.running(), 2u);

  ex.kill(gpu);
  EXPECT_EQ(wait_exit(ex, gpu).kind, ExitKind::killed);
  EXPECT_EQ(ex.free_cpu_slots(), 1);
  EXPECT_EQ(ex.free_gpu_slots(), 1);
  EXPECT_TRUE(ex.has_capacity(sh("x", "true", 1, 1)));
  EXPECT_FALSE(ex.has_capacity(sh("x", "true", 2)));
  ex.kill(big);
  EXPECT_EQ(wait_exit(ex, big).kind, ExitKind::killed);
  EXPECT_EQ(ex.free_cpu_slots(), 3);
  EXPECT_EQ(ex.running(), 0u);
}

TEST_F(LocalExecutorTest, LaunchErrorsAreClear) {
  LocalExecutor ex(slots(2));
  try {
    ex.launch(spec("missing", {"/nonexistent/precon-train"}));
    ADD_FAILURE() << "launch of a missing program succeeded";
  } catch (const ExecError& e) {
    EXPECT_NE(std::string(e.what()).find("program not found or not executable: /nonexistent/precon-train"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ex.launch(spec("empty", {})), ExecError);
  touch(dir_ / "a_file");
  LaunchSpec under_file = sh("x", "true");
  under_file.run_dir = dir_ / "a_file" / "run";
  EXPECT_THROW(ex.launch(under_file), ExecError);
  EXPECT_EQ(ex.running(), 0u);
  EXPECT_EQ(ex.free_cpu_slots(), 2);
}

TEST_F(LocalExecutorTest, SignalStopSendsTermToTheWholeGroup) {
  LocalExecutor ex(slots(2));
  // A helper in the group that records the TERM it gets, and a "trainer" that checkpoints
  // (exits 75) on TERM the way precon-train does.
  LaunchSpec s = sh("stop", "");
  s.argv = {"/bin/sh", "-c", R"(cd "$1" || exit 1
    (trap 'echo term > helper_got_term; exit 0' TERM; touch helper_ready; while :; do sleep 0.02; done) &
    trap 'while [ ! -e helper_got_term ]; do sleep 0.01; done; exit 75' TERM
    touch ready
    while :; do sleep 0.02; done)",
            "sh", s.run_dir.string()};
  Handle h = launch(ex, s);
  ASSERT_TRUE(wait_until([&] { return fs::exists(s.run_dir / "ready") && fs::exists(s.run_dir / "helper_ready"); }));
  ex.signal_stop(h);
  ExitStatus st = wait_exit(ex, h);
  EXPECT_EQ(st.kind, ExitKind::requeue) << st.detail;
  EXPECT_EQ(st.code, 75);
  EXPECT_TRUE(fs::exists(s.run_dir / "helper_got_term"));
  ex.signal_stop(h);  // already reported: nothing to signal
  ex.kill(h);
  EXPECT_TRUE(ex.poll().empty());
}

TEST_F(LocalExecutorTest, AStopSentAsTheAttemptStartsIsNotLost) {
  // The stop reaches the group while the wrapper is still starting the program (before it sets
  // up its own signal handling, or before it forks the program): it must end the program all
  // the same. Before the fix the wrapper's SIG_IGN discarded it, and the first launch already
  // ran on for its 30 s.
  LocalExecutor ex(slots(1));
  for (int i = 0; i < 20; ++i) {
    Handle h = launch(ex, spec("early" + std::to_string(i), {"/bin/sleep", "30"}));
    ex.signal_stop(h);
    const ExitStatus st = wait_exit(ex, h, 10.0);
    EXPECT_EQ(st.kind, ExitKind::killed) << "launch " << i << ": " << st.detail;
    EXPECT_EQ(st.signal, SIGTERM) << "launch " << i << ": " << st.detail;
  }
}

TEST_F(LocalExecutorTest, KillEndsTheGroupIncludingGrandchildren) {
  LocalExecutor ex(slots(2));
  LaunchSpec s = sh("kill", "");
  s.argv = {"/bin/sh", "-c", R"(sleep 30 & echo $! > "$1/grandchild"; trap '' TERM; sleep 30 & wait)", "sh",
            s.run_dir.string()};
  Handle h = launch(ex, s);
  pid_t grandchild = read_pid_file(s.run_dir / "grandchild");
  extra_pids_.push_back(grandchild);
  ASSERT_TRUE(alive(grandchild));
  ex.kill(h);
  ExitStatus st = wait_exit(ex, h);
  EXPECT_EQ(st.kind, ExitKind::killed);
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_EQ(st.detail, "killed by SIGKILL");
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }));
}

TEST_F(LocalExecutorTest, LeftoverProcessesDieWhenTheAttemptEnds) {
  LocalExecutor ex(slots(2));
  LaunchSpec s = sh("leftover", "");
  s.argv = {"/bin/sh", "-c", R"(sleep 30 & echo $! > "$1/grandchild"; exit 0)", "sh", s.run_dir.string()};
  Handle h = launch(ex, s);
  EXPECT_EQ(wait_exit(ex, h).kind, ExitKind::succeeded);
  pid_t grandchild = read_pid_file(s.run_dir / "grandchild");
  extra_pids_.push_back(grandchild);
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }));
}

TEST_F(LocalExecutorTest, AttemptSurvivesTheExecutorBeingDestroyed) {
  auto ex = std::make_unique<LocalExecutor>(slots(2));
  LaunchSpec s = sh("survive", "");
  s.argv = {"/bin/sh", "-c", R"(while [ ! -e "$1/go" ]; do sleep 0.02; done; echo done > "$1/marker")", "sh",
            s.run_dir.string()};
  Handle h = launch(*ex, s);
  ex.reset();  // the controller goes away
  // Deliberately lets time pass: the worker must still be alive a while after the executor is
  // gone (a kill on destruction would have landed by then); there is no event to wait for.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(alive(pid_of(h)));
  touch(s.run_dir / "go");
  EXPECT_TRUE(wait_until([&] { return fs::exists(LocalExecutor::exit_status_path(s.run_dir, 1)); }));
  EXPECT_EQ(read_text(s.run_dir / "marker"), "done\n");
  EXPECT_EQ(read_text(LocalExecutor::exit_status_path(s.run_dir, 1)).rfind("exit 0\npid ", 0), 0u);
}

TEST_F(LocalExecutorTest, AdoptRunningAttemptInTheSameProcess) {
  auto first = std::make_unique<LocalExecutor>(slots(4, {0, 1}));
  LaunchSpec s = sh("adopt_same", "", 3, 1);
  s.argv = {"/bin/sh", "-c", R"(while [ ! -e "$1/go" ]; do sleep 0.02; done; exit 3)", "sh", s.run_dir.string()};
  Handle h = launch(*first, s);
  first.reset();

  LocalExecutor second(slots(4, {0, 1}));
  EXPECT_FALSE(second.adopt(h).has_value());
  EXPECT_FALSE(second.adopt(h).has_value());  // twice: still one attempt
  EXPECT_EQ(second.running(), 1u);
  EXPECT_EQ(second.free_cpu_slots(), 1);  // the slots it held are reserved again
  EXPECT_EQ(second.free_gpu_slots(), 1);
  EXPECT_TRUE(second.poll().empty());
  touch(s.run_dir / "go");
  ExitStatus st = wait_exit(second, h);
  EXPECT_EQ(st.kind, ExitKind::failed);
  EXPECT_EQ(st.code, 3);
  EXPECT_EQ(st.detail, "exit code 3");
  EXPECT_EQ(second.free_cpu_slots(), 4);
  EXPECT_EQ(second.free_gpu_slots(), 2);
  EXPECT_EQ(second.running(), 0u);
}

// A controller killed after the fork but before it recorded the attempt launches the same
// attempt number again after its restart: the program must not start a second time.
TEST_F(LocalExecutorTest, RelaunchOfAnUnrecordedAttemptTakesOverItsWrapper) {
  auto first = std::make_unique<LocalExecutor>(slots(4));
  LaunchSpec running = sh("relaunch_running", "");
  running.argv = {"/bin/sh", "-c", R"(echo start >> "$1/starts"; while [ ! -e "$1/go" ]; do sleep 0.02; done; exit 3)",
                  "sh", running.run_dir.string()};
  LaunchSpec ended = sh("relaunch_ended", "");
  ended.argv = {"/bin/sh", "-c", R"(echo start >> "$1/starts"; exit 75)", "sh", ended.run_dir.string()};
  const Handle h_running = launch(*first, running);
  const Handle h_ended = launch(*first, ended);
  ASSERT_TRUE(wait_until([&] { return fs::exists(running.run_dir / "starts"); }));
  ASSERT_TRUE(wait_until([&] { return waitable(pid_of(h_ended)); }));
  first.reset();  // died before the scheduler learnt either handle

  LocalExecutor second(slots(4));
  const Handle again_running = second.launch(running);
  const Handle again_ended = second.launch(ended);
  EXPECT_EQ(again_running.external_id, h_running.external_id);
  EXPECT_EQ(again_ended.external_id, h_ended.external_id);
  EXPECT_EQ(second.running(), 1u);
  EXPECT_EQ(second.free_cpu_slots(), 3);
  ExitStatus e = wait_exit(second, again_ended);
  EXPECT_EQ(e.kind, ExitKind::requeue) << e.detail;
  EXPECT_EQ(e.code, 75);
  touch(running.run_dir / "go");
  ExitStatus r = wait_exit(second, again_running);
  EXPECT_EQ(r.kind, ExitKind::failed) << r.detail;
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(read_text(running.run_dir / "starts"), "start\n");  // started once, not twice
  EXPECT_EQ(read_text(ended.run_dir / "starts"), "start\n");
  EXPECT_EQ(second.free_cpu_slots(), 4);

  LaunchSpec next = running;  // the next attempt number is a new launch
  next.attempt = 2;
  ::unlink((running.run_dir / "go").c_str());
  touch(running.run_dir / "go");
  ExitStatus n = wait_exit(second, launch(second, next));
  EXPECT_EQ(n.code, 3);
  EXPECT_EQ(read_text(running.run_dir / "starts"), "start\nstart\n");
}

TEST_F(LocalExecutorTest, AdoptFinishedAttemptReturnsStatusFromFile) {
  auto first = std::make_unique<LocalExecutor>(slots(2));
  LaunchSpec s = sh("adopt_finished", "exit 75");
  Handle h = launch(*first, s);
  ASSERT_TRUE(wait_until([&] { return waitable(pid_of(h)); }));  // the wrapper has exited (unreaped)
  first.reset();
  LocalExecutor second(slots(2));
  auto st = second.adopt(h);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kind, ExitKind::requeue);
  EXPECT_EQ(st->code, 75);
  EXPECT_EQ(second.running(), 0u);
  EXPECT_TRUE(second.poll().empty());
}

TEST_F(LocalExecutorTest, AdoptGoneOrReusedPidWithoutFileIsLost) {
  LocalExecutor ex(slots(2));
  Handle running = launch(ex, sh("running", "sleep 30"));

  // The pid is alive but it is another process now (start time differs).
  Handle reused = running;
  reused.run_dir = dir_ / "reused";
  reused.external_id = std::to_string(pid_of(running)) + ":" +
                       std::to_string(std::stoull(running.external_id.substr(running.external_id.find(':') + 1)) + 1);
  LocalExecutor other(slots(2));
  auto st = other.adopt(reused);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kind, ExitKind::lost);
  EXPECT_EQ(st->detail, "process vanished while the controller was down and left no exit status");

  // A pid with no process at all.
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  Handle vanished = reused;
  vanished.external_id = std::to_string(gone) + ":12345";
  st = other.adopt(vanished);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kind, ExitKind::lost);

  Handle garbage = reused;
  garbage.external_id = "not-a-pid";
  EXPECT_EQ(other.adopt(garbage)->kind, ExitKind::lost);
  Handle elsewhere = running;
  elsewhere.nodes = "some-other-host";
  elsewhere.run_dir = dir_ / "reused";
  EXPECT_EQ(other.adopt(elsewhere)->kind, ExitKind::lost);
  Handle slurm = running;
  slurm.executor = "slurm";
  EXPECT_THROW(other.adopt(slurm), ExecError);
  EXPECT_EQ(other.running(), 0u);

  ex.kill(running);
  EXPECT_EQ(wait_exit(ex, running).kind, ExitKind::killed);
}

// The real restart case: the attempts were launched by another process that then died, so
// they are not our children and cannot be waited for; their status comes from the file.
// Process tree: test ─> reaper (subreaper, takes the orphans) ─> controller ─> wrappers.
TEST_F(LocalExecutorTest, AdoptAttemptsOfADeadControllerProcess) {
  const fs::path go = dir_ / "go";
  LaunchSpec waits = sh("waits", "while [ ! -e '" + go.string() + "' ]; do sleep 0.02; done; exit 75");
  LaunchSpec killed = sh("killed", "sleep 30");
  LaunchSpec finished = sh("finished", "exit 0");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t reaper = ::fork();
  ASSERT_GE(reaper, 0);
  if (reaper == 0) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t controller = ::fork();
    if (controller == 0) {
      ::close(fds[0]);
      LocalExecutor ex(slots(4));
      std::string ids;
      for (const LaunchSpec* s : {&waits, &killed, &finished}) ids += ex.launch(*s).external_id + "\n";
      ssize_t n = ::write(fds[1], ids.data(), ids.size());
      ::_exit(n == static_cast<ssize_t>(ids.size()) ? 0 : 1);  // dies without cleaning up
    }
    ::close(fds[0]);
    ::close(fds[1]);
    while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
    }
    ::_exit(controller > 0 ? 0 : 1);
  }
  ::close(fds[1]);
  std::string ids;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) ids.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);

  std::istringstream lines(ids);
  std::vector<Handle> handles;
  for (const LaunchSpec* s : {&waits, &killed, &finished}) {
    Handle h;
    h.executor = "local";
    ASSERT_TRUE(std::getline(lines, h.external_id)) << "the controller process did not report 3 launches";
    h.nodes = [] {
      char name[256] = {};
      ::gethostname(name, sizeof name - 1);
      return std::string(name);
    }();
    h.trial_id = s->trial_id;
    h.attempt = s->attempt;
    h.run_dir = s->run_dir;
    pids_.push_back(pid_of(h));
    handles.push_back(h);
  }
  siginfo_t si{};
  for (const Handle& h : handles) {  // not ours to wait for: the reaper is their parent now
    EXPECT_EQ(::waitid(P_PID, static_cast<id_t>(pid_of(h)), &si, WEXITED | WNOHANG | WNOWAIT), -1);
  }
  ASSERT_TRUE(wait_until([&] { return !alive(pid_of(handles[2])); }));

  LocalExecutor restarted(slots(4));
  EXPECT_FALSE(restarted.adopt(handles[0]).has_value());
  EXPECT_FALSE(restarted.adopt(handles[1]).has_value());
  auto done = restarted.adopt(handles[2]);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->kind, ExitKind::succeeded);
  EXPECT_EQ(restarted.running(), 2u);
  EXPECT_EQ(restarted.free_cpu_slots(), 2);

  restarted.kill(handles[1]);
  ExitStatus k = wait_exit(restarted, handles[1]);
  EXPECT_EQ(k.kind, ExitKind::killed);
  EXPECT_EQ(k.signal, SIGKILL);
  EXPECT_TRUE(restarted.poll().empty());
  touch(go);
  ExitStatus r = wait_exit(restarted, handles[0]);
  EXPECT_EQ(r.kind, ExitKind::requeue) << r.detail;
  EXPECT_EQ(r.code, 75);
  EXPECT_EQ(restarted.running(), 0u);
  EXPECT_EQ(restarted.free_cpu_slots(), 4);
  int status = 0;
  ASSERT_EQ(::waitpid(reaper, &status, 0), reaper);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace precon::orch
