// The local executor's outcomes: exit codes mapped to what the scheduler does (sh and the real
// precon-train), an out-of-memory kill told from any other SIGKILL (oom.h), with a real one in a
// small memory cgroup, and the error lines a failed attempt's reason quotes.
#include "orchestrator/exec/local_executor.h"
#include "orchestrator/exec/oom.h"
#include "tests/common/memory_cgroup.h"
#include "tests/orchestrator/support/local_executor_fixture.h"

namespace precon::orch::exec_testing {
namespace {

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

}  // namespace
}  // namespace precon::orch::exec_testing
