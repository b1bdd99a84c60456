// Faults on the Slurm test cluster: the controller killed with SIGKILL again and again during a
// sweep, slurmctld down while the controller runs and then back, a job killed by the node
// (`scancel -s KILL`), and a job that stays PENDING. Each case ends in the right trial state with
// a reason. PRECON_FAULT_KILLS controller kills (2 in CI, 10 in tests/faults/run_faults.sh).
#include <random>
#include <sstream>
#include <set>

#include "tests/faults/fault_fixture.h"
#include "tests/orchestrator/support/slurm_cluster_fixture.h"

namespace precon::orch::testing {
namespace {

class SlurmFaults : public FaultFixtureOf<SlurmCluster> {
 protected:
  // The test cluster's state directory (where slurmctld's pid file lives).
  static fs::path cluster_dir() { return fs::path(std::getenv("SLURM_CONF")).parent_path(); }
  static void cluster_up() {
    CommandResult r = run_command({PRECON_SOURCE_DIR "/deploy/slurm/cluster.sh", "up", cluster_dir().string()},
                                  seconds(120));
    ASSERT_TRUE(r.ok()) << r.message() << "\n" << r.out;
  }
};

TEST_F(SlurmFaults, ControllerKilledRepeatedlyDuringASweepEveryTrialEndsOnce) {
  const int kills = env_count("PRECON_FAULT_KILLS", 2);
  const unsigned seed = static_cast<unsigned>(env_count("PRECON_FAULT_SEED", 20261201));
  std::mt19937 rng(seed);
  std::printf("seed %u, %d kills\n", seed, kills);
  ServeProcess controller(dir_, {"--slurm", "on", "--slurm-poll-interval", "0.3"});
  ASSERT_TRUE(controller.start());
  const std::string url = controller.url();
  const int steps = 150 * kills;
  const int64_t id = submit(url, slurm_recipe(steps, "", "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n"
                                                         "\"optimizer.lr\" = [0.001, 0.002, 0.003]\n"
                                                         "\"train.checkpoint_every\" = [10]\n"));
  ASSERT_TRUE(wait_for([&] {
    for (const json& x : trials(url, id))
      if (x["last_step"].get<int64_t>() > 5) return true;
    return false;
  }, seconds(60)));
  int restarts = 0;
  for (int k = 0; k < kills; ++k) {
    const auto at = std::chrono::steady_clock::now() + std::chrono::milliseconds(300 + rng() % 1500);
    wait_for([&] { return std::chrono::steady_clock::now() >= at; }, seconds(5));
    controller.kill9();
    ASSERT_TRUE(controller.start());
    ++restarts;
  }
  ASSERT_TRUE(done(url, id, seconds(240)));
  const json events = get(url, "/api/v1/events?limit=10000&experiment=" + std::to_string(id));
  int lost = 0, bad = 0;
  const json ts = trials(url, id);
  ASSERT_EQ(ts.size(), 3u);
  for (const json& x : ts) {
    const int64_t tid = x["id"];
    SCOPED_TRACE("trial " + std::to_string(tid));
    const json t = trial(url, tid);
    EXPECT_EQ(t["state"], "completed") << t.dump();
    const auto [endings, adoptions] = endings_and_adoptions(events, tid);
    EXPECT_EQ(endings, 1);
    bad += endings != 1 || t["state"] != "completed";
    // One Slurm job per attempt, never two for one attempt, one after another.
    const json& a = t["attempts"];
    std::set<std::string> jobs;
    for (size_t i = 0; i < a.size(); ++i) {
      jobs.insert(a[i]["external_id"].get<std::string>() + "/" + std::to_string(a[i]["number"].get<int64_t>()));
      if (i + 1 < a.size()) {
        EXPECT_LE(a[i]["ended_at"].get<double>(), a[i + 1]["started_at"].get<double>()) << a.dump();
      }
    }
    EXPECT_EQ(jobs.size(), a.size()) << a.dump();
    const json m = losses(url, tid);
    lost += steps - static_cast<int>(m["steps"].size());
    EXPECT_EQ(m["steps"].size(), static_cast<size_t>(steps));
  }
  controller.terminate();
  table_row("kill -9 controller (Slurm)", 3, restarts, lost, bad == 0 && lost == 0 ? "each trial ended once" : "FAILED");
}

// The controller dies between sbatch and recording the attempt (PRECON_FAULT_CONTROLLER_DIE=
// after_spawn), or between the attempt row and marking the trial running (after_attempt).
// Restarted, it takes the submitted job over: one job, one trainer start, one ending.
TEST_F(SlurmFaults, ControllerDiesMidLaunchTheJobRunsOnce) {
  for (const char* point : {"after_spawn", "after_attempt"}) {
    SCOPED_TRACE(point);
    const fs::path dir = dir_ / point;
    fs::create_directories(dir);
    ServeProcess controller(dir, {"--slurm", "on", "--slurm-poll-interval", "0.3"});
    const int64_t id = submit_then_die_at(controller, point, slurm_recipe(100, "", ""));
    ASSERT_GT(id, 0);
    const std::string url = controller.url();
    ASSERT_TRUE(done(url, id, seconds(180)));
    const json ts = trials(url, id);
    ASSERT_EQ(ts.size(), 1u);
    const int64_t tid = ts[0]["id"];
    const json t = trial(url, tid);
    EXPECT_EQ(t["state"], "completed") << t.dump();
    EXPECT_EQ(t["attempts"].size(), 1u) << t.dump();
    const json events = get(url, "/api/v1/events?limit=1000&experiment=" + std::to_string(id));
    EXPECT_EQ(endings_and_adoptions(events, tid).endings, 1);
    int jobs = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(t["run_dir"].get<std::string>()))
      jobs += e.path().filename().string().rfind("slurm_job.", 0) == 0;
    EXPECT_EQ(jobs, 1) << "sbatch ran " << jobs << " times for one attempt";
    const int starts = trainer_starts(t["run_dir"].get<std::string>());
    EXPECT_EQ(starts, 1) << "the trainer was started " << starts << " times";
    EXPECT_EQ(losses(url, tid)["steps"].size(), 100u);
    controller.terminate();
  }
}

// slurmctld stops mid-run and comes back: the running job reports on, a sweep submitted meanwhile
// waits with the reason, and both complete once Slurm answers again. The trainer is paced: an
// unpaced 1000-step run could end while a loaded machine was still stopping slurmctld.
TEST_F(SlurmFaults, SlurmctldDownWhileTheControllerRunsThenBack) {
  // The run must outlast the outage on a loaded machine too (stopping slurmctld and seeing it gone
  // can take tens of seconds there): each step of these trainers lasts at least 70 ms.
  const PacedSteps paced(70);
  auto c = start();
  const std::string url = c->url();
  const int steps = 1000;
  const int64_t id = submit(url, slurm_recipe(steps, "", "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n"
                                                         "\"train.checkpoint_every\" = [10]\n"
                                                         "\"train.keep_checkpoints\" = [2]\n"));
  const int64_t tid = trials(url, id)[0]["id"];
  auto reference = start_reference(url, tid);
  ASSERT_TRUE(wait_for([&] { return trial(url, tid)["last_step"].get<int64_t>() > 20; }, seconds(60)));
  // slurmctld stops; the job goes on running on its node and reporting to the controller.
  const fs::path pid_file = cluster_dir() / "run" / "slurmctld.pid";
  pid_t ctld = 0;
  std::ifstream(pid_file) >> ctld;
  ASSERT_GT(ctld, 0);
  ::kill(ctld, SIGTERM);
  ASSERT_TRUE(wait_for([&] { return !slurm({"sinfo", "-h"}).ok(); }, seconds(30)));
  const int64_t at_stop = trial(url, tid)["last_step"];
  ASSERT_LT(at_stop, steps - 100) << "the run got too near its end before the outage to show that it goes on";
  // A sweep submitted meanwhile waits for Slurm, pending with the reason, instead of failing.
  const int64_t later = submit(url, slurm_recipe(10, "", ""));
  EXPECT_TRUE(wait_for([&] { return trial(url, tid)["last_step"].get<int64_t>() > at_stop + 20; }, seconds(60)));
  EXPECT_EQ(trial(url, tid)["state"], "running");
  EXPECT_TRUE(wait_for([&] {
    return trials(url, later)[0]["reason"].get<std::string>().find("waiting to launch") != std::string::npos;
  }, seconds(60))) << trials(url, later).dump();
  EXPECT_EQ(trials(url, later)[0]["state"], "pending") << trials(url, later).dump();
  cluster_up();
  ASSERT_TRUE(done(url, id, seconds(180)));
  ASSERT_TRUE(done(url, later, seconds(120)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "completed") << t.dump();
  EXPECT_EQ(t["attempts"].size(), 1u) << t.dump();
  EXPECT_EQ(trials(url, later)[0]["state"], "completed") << trials(url, later).dump();
  expect_same_curve(url, tid, steps, std::move(reference));
  c->stop();
  table_row("slurmctld down, then back", 2, 0, HasFailure() ? -1 : 0,
            !HasFailure() ? "job ran on, later sweep waited, both completed" : "FAILED");
}

TEST_F(SlurmFaults, JobKilledOnItsNodeIsRetriedFromItsCheckpoint) {
  // Twice: `scancel -s KILL` (Slurm ends the job: SIGTERM, then SIGKILL after KillWait) and a
  // SIGKILL of the trainer process itself on its node (an out-of-memory kill). Each attempt ends
  // with the reason, and the next resumes from the last checkpoint to the uninterrupted curve.
  auto c = start();
  const std::string url = c->url();
  const int steps = 600;
  const int64_t id = submit(url, slurm_recipe(steps, "", "[sweep]\nmax_attempts = 2\n[sweep.parameters]\n"
                                                         "\"train.checkpoint_every\" = [1]\n"
                                                         "\"train.keep_checkpoints\" = [2]\n"));
  const int64_t tid = trials(url, id)[0]["id"];
  auto reference = start_reference(url, tid);
  const auto running_attempt = [&](size_t n) {
    return wait_for([&] {
      const json t = trial(url, tid);
      return t["attempts"].size() == n && t["attempts"][n - 1]["state"] == "open" &&
             t["last_step"].get<int64_t>() > static_cast<int64_t>(20 * n);
    }, seconds(120));
  };
  ASSERT_TRUE(running_attempt(1));
  const std::string job = trial(url, tid)["attempts"][0]["external_id"];
  ASSERT_TRUE(slurm({"scancel", "-s", "KILL", job}).ok());
  ASSERT_TRUE(running_attempt(2));
  // The trainer's pid among the job's processes on its node (this machine).
  const std::string job2 = trial(url, tid)["attempts"][1]["external_id"];
  pid_t trainer = 0;
  ASSERT_TRUE(wait_for([&] {
    CommandResult r = slurm({"scontrol", "listpids", job2});
    std::istringstream rows(r.out);
    for (std::string line; std::getline(rows, line);) {
      const pid_t pid = static_cast<pid_t>(std::atoi(line.c_str()));
      std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
      std::string name;
      if (pid > 0 && comm >> name && name == "precon-train") trainer = pid;
    }
    return trainer > 0;
  }, seconds(30)));
  ASSERT_EQ(::kill(trainer, SIGKILL), 0);
  ASSERT_TRUE(done(url, id, seconds(240)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "completed") << t.dump();
  ASSERT_EQ(t["attempts"].size(), 3u) << t.dump();
  const std::string cancelled = t["attempts"][0]["detail"], killed = t["attempts"][1]["detail"];
  EXPECT_NE(cancelled.find("CANCELLED"), std::string::npos) << cancelled;
  EXPECT_TRUE(killed.find("SIGKILL") != std::string::npos || killed.find("137") != std::string::npos) << killed;
  EXPECT_NE(t["attempts"][1]["state"], "succeeded") << t.dump();
  expect_same_curve(url, tid, steps, std::move(reference));
  c->stop();
  table_row("job killed on its node (scancel -s KILL; kill -9 of the task)", 1, 2, HasFailure() ? -1 : 0,
            !HasFailure() ? "each attempt ended with the reason, resumed, completed" : "FAILED");
}

TEST_F(SlurmFaults, JobThatStaysPendingShowsSlurmsReasonAndCancels) {
  ASSERT_TRUE(slurm({"scontrol", "update", "PartitionName=batch", "State=DOWN"}).ok());
  struct PartitionBackUp {
    ~PartitionBackUp() { slurm({"scontrol", "update", "PartitionName=batch", "State=UP"}); }
  } back_up;
  auto c = start();
  const std::string url = c->url();
  const int64_t id = submit(url, slurm_recipe(10, "partition = \"batch\"\n", ""));
  const int64_t tid = trials(url, id)[0]["id"];
  const std::string events_url = "/api/v1/events?limit=1000&experiment=" + std::to_string(id);
  std::string note;
  const bool seen = wait_for([&] {
    const json events = get(url, events_url);
    for (const json& e : events["events"])
      if (e["kind"] == "attempt_state" && e["message"].get<std::string>().find("PENDING (PartitionDown)") != std::string::npos)
        note = e["message"].get<std::string>();
    return !note.empty();
  }, seconds(30));
  ASSERT_TRUE(seen) << get(url, events_url).dump();
  EXPECT_NE(trial(url, tid)["state"], "completed");
  ASSERT_EQ(post(url, "/api/v1/trials/" + std::to_string(tid) + "/cancel", "{}", "admin-secret").status, 200);
  ASSERT_TRUE(done(url, id, seconds(60)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "cancelled") << t.dump();
  const std::string job = t["attempts"][0]["external_id"];
  EXPECT_TRUE(wait_for([&] { return active_state(job).empty(); }, seconds(30))) << active_state(job);
  c->stop();
  table_row("job left PENDING", 1, 0, 0, !HasFailure() ? "reason shown (" + note + "), cancelled" : "FAILED");
}

TEST_F(SlurmFaults, JobPendingPastItsLimitIsCancelledAndTheTrialFailsWithSlurmsReason) {
  ASSERT_TRUE(slurm({"scontrol", "update", "PartitionName=batch", "State=DOWN"}).ok());
  struct PartitionBackUp {
    ~PartitionBackUp() { slurm({"scontrol", "update", "PartitionName=batch", "State=UP"}); }
  } back_up;
  auto c = start();
  const std::string url = c->url();
  // Retries allowed: a job that cannot start is not retried, since its next one would wait the same.
  const int64_t id = submit(url, slurm_recipe(10, "partition = \"batch\"\npending_limit = \"0:03\"\n",
                                              "[sweep]\nmax_attempts = 3\n[sweep.parameters]\n\"train.checkpoint_every\" = [5]\n"));
  const int64_t tid = trials(url, id)[0]["id"];
  ASSERT_TRUE(done(url, id, seconds(60)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "failed") << t.dump();
  const std::string reason = t["reason"];
  EXPECT_NE(reason.find("stayed PENDING (PartitionDown)"), std::string::npos) << reason;
  EXPECT_NE(reason.find("resources.pending_limit (3 s)"), std::string::npos) << reason;
  ASSERT_EQ(t["attempts"].size(), 1u) << t.dump();
  EXPECT_EQ(t["attempts"][0]["state"], "failed") << t.dump();
  const std::string job = t["attempts"][0]["external_id"];
  EXPECT_TRUE(wait_for([&] { return active_state(job).empty(); }, seconds(30))) << active_state(job);
  c->stop();
  table_row("job PENDING past resources.pending_limit", 1, 0, 0,
            !HasFailure() ? "cancelled, trial failed with Slurm's reason, not retried" : "FAILED");
}

TEST_F(SlurmFaults, TheLimitDoesNotCountAWaitBehindTheSweepsOwnThrottle) {
  // Two trials in one array throttled to one at a time: the second waits (JobArrayTaskLimit) for
  // the first, paced to last longer than the 3-second limit, and still runs.
  const PacedSteps paced(40);
  auto c = start();
  const std::string url = c->url();
  const int64_t id = submit(url, slurm_recipe(150, "pending_limit = \"0:03\"\n",
                                              "[sweep]\nmax_concurrent = 1\n[sweep.parameters]\n"
                                              "\"optimizer.lr\" = [0.001, 0.002]\n"));
  ASSERT_TRUE(done(url, id, seconds(120)));
  const json ts = trials(url, id);
  ASSERT_EQ(ts.size(), 2u);
  for (const json& t : ts) EXPECT_EQ(t["state"], "completed") << ts.dump();
  const json events = get(url, "/api/v1/events?limit=1000&experiment=" + std::to_string(id));
  bool throttled = false;
  for (const json& e : events["events"])
    throttled |= e["message"].get<std::string>().find("PENDING (JobArrayTaskLimit)") != std::string::npos;
  EXPECT_TRUE(throttled) << "no trial waited behind the throttle, so this tested nothing: " << events.dump();
  c->stop();
  table_row("array task throttled past resources.pending_limit", 2, 0, 0,
            !HasFailure() ? "its wait behind max_concurrent was not counted; both completed" : "FAILED");
}

}  // namespace
}  // namespace precon::orch::testing
