// kill -9 of a worker at chosen points of its run (between steps, inside a checkpoint write,
// right after a report was acknowledged), through worker/common/fault_hook.h: with retries on,
// every trial finishes on the uninterrupted run's curve bit for bit, and no metric point the
// controller had stored is missing or changed. PRECON_FAULT_POINTS trials (3 in CI, 20 in
// tests/faults/run_faults.sh), one fault each, points drawn from a printed seed.
#include <random>

#include "orchestrator/service/controller.h"
#include "tests/faults/fault_fixture.h"

namespace precon::orch::testing {
namespace {

class WorkerKill : public FaultFixture {};

TEST_F(WorkerKill, EveryRunResumesToTheUninterruptedCurveAndLosesNoMetric) {
  const int points = env_count("PRECON_FAULT_POINTS", 3);
  const int steps = 40, every = 5;
  const unsigned seed = static_cast<unsigned>(env_count("PRECON_FAULT_SEED", 20261201));
  std::mt19937 rng(seed);
  // Trials differ only in train.keep_checkpoints, which leaves the curve alone: one reference.
  std::string keep;
  for (int i = 0; i < points; ++i) keep += (i ? ", " : "") + std::to_string(3 + i);
  const std::string text = recipe(steps, "[sweep]\nmax_concurrent = 2\nmax_attempts = 3\n[sweep.parameters]\n"
                                         "\"train.checkpoint_every\" = [" + std::to_string(every) + "]\n"
                                         "\"train.keep_checkpoints\" = [" + keep + "]\n");
  // Trial ids of a fresh database are 1..points: the plan is written before anything launches.
  const fs::path plan = dir_ / "plan";
  const fs::path trainer = fault_trainer(plan);
  const char* phases[] = {"step", "ckpt", "report"};
  std::vector<std::string> faults;
  for (int i = 0; i < points; ++i) {
    const std::string phase = phases[i < 3 ? i : rng() % 3];
    std::string f;
    if (phase == "step") f = "step:" + std::to_string(2 + rng() % (steps - 3));
    // A checkpoint at a multiple of `every` before the last step, cut after 1..3 of its files.
    if (phase == "ckpt") f = "ckpt:" + std::to_string(every * (1 + rng() % (steps / every - 1))) + ":" +
                             std::to_string(1 + rng() % 3);
    if (phase == "report") f = "report:" + std::to_string(2 + rng() % (steps - 3));
    std::ofstream(plan / std::to_string(i + 1)) << f;
    faults.push_back(f);
  }
  ControllerOptions o = controller_options();
  o.trainer = trainer;
  o.poll_interval = std::chrono::milliseconds(100);
  o.slurm = "off";
  Controller c(o);
  c.start();
  const std::string url = c.url();
  const int64_t id = submit(url, text);
  ASSERT_TRUE(done(url, id, seconds(600)));
  const json ts = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(ts.size(), static_cast<size_t>(points));
  const fs::path config = fs::path(ts[0]["run_dir"].get<std::string>()) / "config.toml";
  const Series want = reference_run(config, "worker-kill");
  ASSERT_EQ(want.at("train_loss").size(), static_cast<size_t>(steps));
  int resumed = 0, lost = 0, failed = 0;
  std::printf("seed %u\n%-6s %-14s %-9s %-10s %s\n", seed, "trial", "fault", "attempts", "lost", "state");
  for (const json& x : ts) {
    const int64_t tid = x["id"];
    ASSERT_GE(tid, 1);
    ASSERT_LE(tid, points);
    SCOPED_TRACE("trial " + std::to_string(tid) + ", fault " + faults[tid - 1]);
    const json t = get(url, "/api/v1/trials/" + std::to_string(tid));
    EXPECT_EQ(t["state"], "completed") << t.dump();
    failed += t["state"] != "completed";
    // The fault fired (its marker) and killed the first attempt; the second resumed.
    EXPECT_TRUE(fs::exists(plan / (std::to_string(tid) + ".fired")));
    ASSERT_GE(t["attempts"].size(), 2u) << t.dump();
    EXPECT_EQ(t["attempts"][0]["state"], "killed") << t["attempts"][0].dump();
    resumed += t["attempts"].size() >= 2;
    // Killed after a checkpoint existed: the next attempt resumed from it, not from scratch.
    const int64_t at = std::stoll(faults[tid - 1].substr(faults[tid - 1].find(':') + 1));
    if (at > every) {
      const std::string log = get(url, "/api/v1/trials/" + std::to_string(tid) + "/logs?stream=stderr&lines=400")["text"];
      EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
    }
    const int n = lost_points(want, stored(url, tid));
    lost += n;
    std::printf("%-6lld %-14s %-9zu %-10d %s\n", static_cast<long long>(tid), faults[tid - 1].c_str(),
                t["attempts"].size(), n, t["state"].get<std::string>().c_str());
  }
  c.stop();
  table_row("kill -9 worker (step/ckpt/report)", points, resumed, lost,
            failed == 0 && lost == 0 && resumed == points ? "all completed, same curve" : "FAILED");
}

}  // namespace
}  // namespace precon::orch::testing
