// The Pareto rule of early stopping (several objectives): hand-made curves whose answer is known —
// a trial dominated at a step by min_dominating completed trials stops there, one on the front
// (or only weakly beaten: equal on every objective) goes on, modes flip the comparison, steps
// below min_step and vectors lacking a value decide nothing, and the stored settings read back.
#include "orchestrator/sched/early_stop.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace precon::orch {
namespace {

const std::vector<std::string> kParetoMetrics = {"val_loss", "compute_flops"};

// Completed trials' (val_loss, compute_flops) curves by step: trial -> step -> vector.
using ParetoCurves = std::map<int64_t, std::map<int64_t, std::vector<double>>>;

std::map<int64_t, std::vector<double>> pareto_at(const ParetoCurves& curves, int64_t step) {
  std::map<int64_t, std::vector<double>> out;
  for (const auto& [trial, points] : curves)
    if (auto it = points.find(step); it != points.end()) out[trial] = it->second;
  return out;
}

// The first step the rule stops `own` at (-1: never), checking every step it reports.
int64_t pareto_first_stop(const std::map<int64_t, std::vector<double>>& own, const ParetoCurves& done,
                          const std::vector<bool>& maximize, int64_t min_step, int64_t min_dominating) {
  for (const auto& [step, v] : own)
    if (pareto_stop(99, step, v, pareto_at(done, step), kParetoMetrics, maximize, min_step, min_dominating).stop)
      return step;
  return -1;
}

TEST(EarlyStopPareto, HandCurvesWithKnownAnswers) {
  // Two completed trials: A cheap and poor, B costly and good.
  const ParetoCurves done = {{1, {{100, {3.0, 10.0}}, {200, {2.5, 20.0}}, {300, {2.2, 30.0}}}},
                             {2, {{100, {2.0, 40.0}}, {200, {1.5, 80.0}}, {300, {1.2, 120.0}}}}};
  const std::vector<bool> min_min = {false, false};
  // Worse than A on both at step 200 (dominated by one), not at 100 (cheaper than A there).
  const std::map<int64_t, std::vector<double>> slow_learner = {{100, {3.5, 9.0}}, {200, {2.8, 25.0}}, {300, {2.0, 30.0}}};
  EXPECT_EQ(pareto_first_stop(slow_learner, done, min_min, 100, 1), 200);
  // With min_dominating = 2 it needs both: at 300 it beats A's loss, so never.
  EXPECT_EQ(pareto_first_stop(slow_learner, done, min_min, 100, 2), -1);
  // Worse than both at step 300: stopped there with min_dominating = 2.
  const std::map<int64_t, std::vector<double>> poor = {{100, {2.5, 5.0}}, {200, {2.0, 50.0}}, {300, {2.5, 130.0}}};
  EXPECT_EQ(pareto_first_stop(poor, done, min_min, 100, 2), 300);
  EXPECT_EQ(pareto_first_stop(poor, done, min_min, 100, 1), 300);
  // On the front between A and B at every step: never stopped.
  const std::map<int64_t, std::vector<double>> middle = {{100, {2.5, 20.0}}, {200, {2.0, 50.0}}, {300, {1.5, 60.0}}};
  EXPECT_EQ(pareto_first_stop(middle, done, min_min, 100, 1), -1);
  // Equal to A on both (not dominated: none better on one) goes on.
  const std::map<int64_t, std::vector<double>> twin = {{100, {3.0, 10.0}}};
  EXPECT_EQ(pareto_first_stop(twin, done, min_min, 100, 1), -1);
  // No decision before min_step: from 250 on, the slow learner's one check (300) finds it on the front.
  EXPECT_EQ(pareto_first_stop(slow_learner, done, min_min, 250, 1), -1);
  // The second objective to maximise: at step 100 A's (3.0, 10) beats the slow learner's (3.5, 9).
  EXPECT_EQ(pareto_first_stop(slow_learner, done, {false, true}, 100, 1), 100);
  // A step where no completed trial reported: nothing to compare, no stop.
  EXPECT_EQ(pareto_first_stop({{150, {9.0, 900.0}}}, done, min_min, 100, 1), -1);
}

TEST(EarlyStopPareto, DecisionDataAndMissingValues) {
  const std::map<int64_t, std::vector<double>> done = {{1, {1.0, 1.0}}, {2, {0.5, 3.0}}, {3, {1.0}}};
  const StopDecision d = pareto_stop(7, 100, {2.0, 2.0}, done, kParetoMetrics, {false, false}, 1, 1);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.rule, "pareto");
  EXPECT_EQ(d.data["dominated_by"], nlohmann::json({1}));
  EXPECT_EQ(d.data["compared"], 2);  // trial 3 lacks compute_flops
  EXPECT_NE(d.reason.find("dominated by 1 of 2 completed trials"), std::string::npos) << d.reason;
  // The trial's own vector lacking a value, or NaN: no decision.
  EXPECT_TRUE(pareto_stop(7, 100, {2.0}, done, kParetoMetrics, {false, false}, 1, 1).rule.empty());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(pareto_stop(7, 100, {2.0, nan}, done, kParetoMetrics, {false, false}, 1, 1).rule.empty());
  // A completed trial is never compared with itself.
  EXPECT_FALSE(pareto_stop(1, 100, {2.0, 2.0}, {{1, {1.0, 1.0}}}, kParetoMetrics, {false, false}, 1, 1).stop);
}

TEST(EarlyStopPareto, StoredSettingsReadBack) {
  const EarlyStopSettings s = early_stop_settings_from_json(
      nlohmann::json{{"method", "pareto"}, {"min_step", 50}, {"min_dominating", 3}}, "val_loss", "min", "exp");
  EXPECT_EQ(s.method, "pareto");
  EXPECT_EQ(s.min_dominating, 3);
  EXPECT_EQ(s.min_step, 50);
  // The stopper accepts the method and leaves its decisions to pareto_stop.
  const EarlyStopper stopper(s);
  EXPECT_FALSE(stopper.report(1, 100, 1.0, {{1, {{100, 1.0}}}}, {}).stop);
}

}  // namespace
}  // namespace precon::orch
