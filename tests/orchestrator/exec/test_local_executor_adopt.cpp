// The local executor's adoption of attempts after a controller restart: running and finished
// attempts, in the same process and from a controller process that died, a relaunch of an attempt
// the controller had not recorded, and pids gone or reused.
#include "orchestrator/exec/local_executor.h"
#include "tests/orchestrator/support/local_executor_fixture.h"

namespace precon::orch::exec_testing {
namespace {

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
}  // namespace precon::orch::exec_testing
