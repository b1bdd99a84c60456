// kill -9 of the controller (`precon serve`, local executor) again and again during a sweep, each
// time restarted on the same database: every trial ends exactly once, no attempt runs beside
// another of the same trial, and every step's metrics are stored. PRECON_FAULT_KILLS kills (3 in
// CI, 10 in tests/faults/run_faults.sh) at moments drawn from a printed seed.
#include <random>

#include "tests/faults/fault_fixture.h"

namespace precon::orch::testing {
namespace {

class ControllerKill : public FaultFixture {};

TEST_F(ControllerKill, EveryTrialEndsOnceAfterRepeatedKillNine) {
  const int kills = env_count("PRECON_FAULT_KILLS", 3);
  const unsigned seed = static_cast<unsigned>(env_count("PRECON_FAULT_SEED", 20261201));
  std::mt19937 rng(seed);
  std::printf("seed %u, %d kills\n", seed, kills);
  const int steps = 400 * kills;
  ServeProcess controller(dir_, {"--cpus", "2", "--slurm", "off"});
  ASSERT_TRUE(controller.start());
  const std::string url = controller.url();
  const int64_t id = submit(url, recipe(steps, "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n"
                                                 "\"optimizer.lr\" = [0.001, 0.002, 0.003]\n"
                                                 "\"train.checkpoint_every\" = [100]\n"));
  ASSERT_TRUE(wait_for([&] {
    for (const json& x : trials_of(url, id))
      if (x["last_step"].get<int64_t>() > 10) return true;
    return false;
  }, seconds(60)));
  int restarts = 0;
  for (int k = 0; k < kills; ++k) {
    // A moment anywhere in the next 0.2..1.5 s of work: mid-report, mid-launch, mid-reconcile.
    const auto at = std::chrono::steady_clock::now() + std::chrono::milliseconds(200 + rng() % 1300);
    wait_for([&] { return std::chrono::steady_clock::now() >= at; }, seconds(5));
    controller.kill9();
    ASSERT_TRUE(controller.start());
    ++restarts;
  }
  ASSERT_TRUE(done(url, id, seconds(600)));
  const json ts = trials_of(url, id);
  ASSERT_EQ(ts.size(), 3u);
  const json events = get(url, "/api/v1/events?limit=10000&experiment=" + std::to_string(id));
  int lost = 0, bad = 0;
  for (const json& x : ts) {
    const int64_t tid = x["id"];
    SCOPED_TRACE("trial " + std::to_string(tid));
    const json t = trial_json(url, tid);
    EXPECT_EQ(t["state"], "completed") << t.dump();
    const auto [endings, adoptions] = endings_and_adoptions(events, tid);
    EXPECT_EQ(endings, 1);
    bad += endings != 1 || t["state"] != "completed";
    // Attempts one after another, each ended before the next began.
    const json& a = t["attempts"];
    for (size_t i = 0; i + 1 < a.size(); ++i) {
      ASSERT_TRUE(a[i]["ended_at"].is_number()) << a.dump();
      EXPECT_LE(a[i]["ended_at"].get<double>(), a[i + 1]["started_at"].get<double>()) << a.dump();
    }
    // The trainer was started once per attempt.
    EXPECT_EQ(trainer_starts(t["run_dir"].get<std::string>()), static_cast<int>(a.size())) << a.dump();
    const json m = get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=train_loss&max_points=0")
        ["metrics"]["train_loss"];
    lost += steps - static_cast<int>(m["steps"].size());
    ASSERT_EQ(m["steps"].size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) ASSERT_EQ(m["steps"][s], s + 1);
  }
  controller.terminate();
  table_row("kill -9 controller (local)", 3, restarts, lost, bad == 0 && lost == 0 ? "each trial ended once" : "FAILED");
}

// The controller dies at a chosen point of its first launch (PRECON_FAULT_CONTROLLER_DIE): right
// after the worker was spawned but before the attempt was recorded, or after the attempt row but
// before the trial was marked running. Restarted, it must neither lose the worker nor start the
// trial a second time beside it.
class ControllerDiesMidLaunch : public FaultFixture, public ::testing::WithParamInterface<const char*> {};

TEST_P(ControllerDiesMidLaunch, TheTrialRunsOnceAndEndsOnce) {
  ServeProcess controller(dir_, {"--cpus", "2", "--slurm", "off"});
  const int64_t id = submit_then_die_at(controller, GetParam(), recipe(300, ""));
  ASSERT_GT(id, 0);
  const std::string url = controller.url();
  ASSERT_TRUE(done(url, id, seconds(300)));
  const json ts = trials_of(url, id);
  ASSERT_EQ(ts.size(), 1u);
  const int64_t tid = ts[0]["id"];
  const json t = trial_json(url, tid);
  EXPECT_EQ(t["state"], "completed") << t.dump();
  const json events = get(url, "/api/v1/events?limit=1000&experiment=" + std::to_string(id));
  EXPECT_EQ(endings_and_adoptions(events, tid).endings, 1);
  EXPECT_EQ(t["attempts"].size(), 1u) << t.dump();
  const int starts = trainer_starts(t["run_dir"].get<std::string>());
  EXPECT_EQ(starts, 1) << "the trainer was started " << starts << " times";
  const json m = get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=train_loss&max_points=0")
      ["metrics"]["train_loss"];
  EXPECT_EQ(m["steps"].size(), 300u);
  controller.terminate();
}

INSTANTIATE_TEST_SUITE_P(Points, ControllerDiesMidLaunch, ::testing::Values("after_spawn", "after_attempt"));

}  // namespace
}  // namespace precon::orch::testing
