// `precon best` at equal compute reads the trainer's compute_flops (the model's and the
// optimizer's FLOPs) and falls back to flops (the model's) for a trial without them.
#include <gtest/gtest.h>

#include "orchestrator/service/queries.h"
#include "tests/common/temp_dir.h"

namespace precon::orch {
namespace {

TEST(BestCompute, EqualComputeCountsTheOptimizersFlops) {
  test::TempDir dir;
  Store store((dir.path / "precon.db").string());
  ExperimentRow e;
  e.name = "compute";
  e.recipe_text = "[train]\nsteps = 100\n";
  e.overrides_json = "[]";
  e.run_root = dir.path.string();
  std::vector<TrialRow> rows(3);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].index = static_cast<int64_t>(i);
    rows[i].params_json = "{}";
  }
  const int64_t id = store.create_experiment(e, rows);
  const std::vector<TrialRow> trials = store.trials(id);
  // The same model FLOPs per step; trial 1's optimizer costs 50 % more (a Muon-like step), trial
  // 2 reports no compute_flops (an older worker): its model FLOPs stand in.
  for (const TrialRow& t : trials) {
    std::vector<MetricPoint> points;
    for (int64_t step = 10; step <= 100; step += 10) {
      const double model = 1e9 * static_cast<double>(step);
      points.push_back({"flops", step, model, 0});
      if (t.index < 2) points.push_back({"compute_flops", step, t.index == 1 ? 1.5 * model : model, 0});
      points.push_back({"val_loss", step, 3.0 - 0.01 * static_cast<double>(step) - 0.1 * static_cast<double>(t.index), 0});
    }
    store.insert_metrics(t.id, points);
    TrialRow done = t;
    done.state = TrialState::completed;
    store.update_trial(done);
  }
  const BestReport r = best_report(store, *store.experiment(id));
  ASSERT_TRUE(r.at_flops.defined);
  // The least compute any trial spent: trials 0 and 2 spent 1e11 in all, trial 1 1.5e11.
  EXPECT_DOUBLE_EQ(r.at_flops.at, 1e11);
  for (const auto& entry : r.at_flops.entries) {
    const int64_t index = entry.trial - trials.front().id;
    // Trial 1 reached 1e11 at step 66.7: its last point at or before is step 60.
    EXPECT_EQ(entry.step, index == 1 ? 60 : 100) << "trial index " << index;
  }
  // At equal steps every trial is compared at step 100, as before.
  EXPECT_EQ(r.at_step.at, 100);
}

}  // namespace
}  // namespace precon::orch
