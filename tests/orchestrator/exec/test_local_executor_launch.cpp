// The local executor's launches against real processes: logs in the run directory, the
// environment, CPU and GPU slots, and clear launch errors.
#include "orchestrator/exec/local_executor.h"
#include "tests/orchestrator/support/local_executor_fixture.h"

namespace precon::orch::exec_testing {
namespace {

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

}  // namespace
}  // namespace precon::orch::exec_testing
