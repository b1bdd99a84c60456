// The local executor's stops: SIGTERM and SIGKILL to an attempt's whole process group, a stop sent
// as the attempt starts, and attempts that outlive the executor (the controller).
#include "orchestrator/exec/local_executor.h"
#include "tests/orchestrator/support/local_executor_fixture.h"

namespace precon::orch::exec_testing {
namespace {

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

}  // namespace
}  // namespace precon::orch::exec_testing
