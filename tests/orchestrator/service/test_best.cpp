// `precon best` logic on hand-made series with known answers.
#include "orchestrator/service/best.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/test_util.h"

namespace precon::orch {
namespace {

using test::kNaN;

BestTrial trial(int64_t id, TrialState state, std::map<int64_t, double> objective,
                std::map<int64_t, double> elapsed = {}, std::map<int64_t, double> step_seconds = {}) {
  BestTrial t;
  t.id = id;
  t.label = "lr=" + std::to_string(id);
  t.state = state;
  t.objective = std::move(objective);
  t.elapsed = std::move(elapsed);
  t.step_seconds = std::move(step_seconds);
  return t;
}

// Six trials, val_loss (min):
//  1 completed  2.0 at 300, 0.125 s/step (slope of elapsed)
//  2 completed  2.3 at 250, 1.8 at 400, 0.2 s/step
//  3 completed  2.5 at 300, 0.2 s/step (one elapsed point: 60 s / 300 steps): worse than 1 on both
//  4 pruned at step 100
//  5 completed  2.0 at 300: ties trial 1 on value and on speed (step_seconds series)
//  6 completed without a single report
std::vector<BestTrial> sweep() {
  using S = TrialState;
  return {
      trial(1, S::completed, {{100, 3.0}, {200, 2.5}, {300, 2.0}},
            {{100, 12.5}, {200, 25}, {300, 37.5}}),
      trial(2, S::completed, {{100, 2.8}, {200, 2.4}, {250, 2.3}, {400, 1.8}},
            {{100, 20}, {200, 40}, {400, 80}}),
      trial(3, S::completed, {{100, 3.5}, {200, 3.0}, {300, 2.5}}, {{300, 60}}),
      trial(4, S::pruned, {{100, 4.0}}, {{100, 5}}),
      trial(5, S::completed, {{100, 2.9}, {200, 2.5}, {300, 2.0}}, {{300, 37.5}},
            {{100, 0.125}, {200, 0.125}, {300, 0.125}}),
      trial(6, S::completed, {}),
  };
}

std::vector<int64_t> ids(const Ranking& r) {
  std::vector<int64_t> out;
  for (const auto& e : r.entries) out.push_back(e.trial);
  return out;
}
std::vector<int64_t> ranks(const Ranking& r) {
  std::vector<int64_t> out;
  for (const auto& e : r.entries) out.push_back(e.rank);
  return out;
}

TEST(Best, RanksAtEqualSteps) {
  const auto r = rank_trials(sweep(), {});
  ASSERT_TRUE(r.at_step.defined);
  EXPECT_EQ(r.at_step.at, 300);  // trials 1, 3, 5 end at 300; 2 goes on to 400
  EXPECT_EQ(ids(r.at_step), (std::vector<int64_t>{1, 5, 2, 3, 4, 6}));
  EXPECT_EQ(ranks(r.at_step), (std::vector<int64_t>{1, 1, 3, 4, 5, 0}));
  const auto& two = r.at_step.entries[2];
  EXPECT_EQ(two.step, 250) << "last value at or before S";
  EXPECT_DOUBLE_EQ(two.value, 2.3);
  EXPECT_TRUE(two.reached);
  const auto& four = r.at_step.entries[4];
  EXPECT_FALSE(four.reached);
  EXPECT_DOUBLE_EQ(four.value, 4.0);
  EXPECT_NE(four.note.find("pruned at step 100"), std::string::npos) << four.note;
  EXPECT_NE(r.at_step.entries[5].note.find("no val_loss reported"), std::string::npos);
}

TEST(Best, AFailedTrialsNoteGivesItsReason) {
  auto trials = sweep();
  BestTrial failed = trial(7, TrialState::failed, {});
  failed.reason = "optimizer.muon.ns_steps must be >= 1 (exit code 2: configuration error, not retried)";
  trials.push_back(failed);
  const auto r = rank_trials(trials, {});
  const std::string want = "failed: " + failed.reason + "; no val_loss reported";
  ASSERT_EQ(r.at_step.entries.back().trial, 7);
  EXPECT_EQ(r.at_step.entries.back().note, want);
  for (const auto& p : r.pareto)
    if (p.trial == 7) {
      EXPECT_EQ(p.note, want);
    }
  EXPECT_NE(format_best_table(r).find(want), std::string::npos);
}

TEST(Best, RanksAtEqualWallClock) {
  const auto r = rank_trials(sweep(), {});
  ASSERT_TRUE(r.at_time.defined);
  EXPECT_DOUBLE_EQ(r.at_time.at, 37.5);  // trials 1 and 5 end at 37.5 s
  // At 37.5 s: 1 and 5 have 2.0; 2 is at step 100 (20 s) with 2.8; 3 at step 100 (20 s,
  // interpolated from step 0) with 3.5; 4 stopped at 5 s.
  EXPECT_EQ(ids(r.at_time), (std::vector<int64_t>{1, 5, 2, 3, 4, 6}));
  EXPECT_EQ(ranks(r.at_time), (std::vector<int64_t>{1, 1, 3, 4, 5, 0}));
  EXPECT_DOUBLE_EQ(r.at_time.entries[2].value, 2.8);
  EXPECT_DOUBLE_EQ(r.at_time.entries[3].seconds, 20);
  EXPECT_EQ(r.at_time.entries[3].step, 100);
}

TEST(Best, ParetoFront) {
  const auto r = rank_trials(sweep(), {});
  ASSERT_EQ(r.pareto.size(), 6u);
  std::vector<int64_t> order;
  for (const auto& p : r.pareto) order.push_back(p.trial);
  EXPECT_EQ(order, (std::vector<int64_t>{1, 5, 2, 3, 4, 6}));
  EXPECT_TRUE(r.pareto[0].on_front);
  EXPECT_TRUE(r.pareto[1].on_front) << "an equal point is not dominated";
  EXPECT_TRUE(r.pareto[2].on_front) << "slower but better";
  EXPECT_EQ(r.pareto[0].seconds_per_step, 0.125);
  EXPECT_EQ(r.pareto[1].seconds_per_step, 0.125);
  EXPECT_DOUBLE_EQ(r.pareto[2].seconds_per_step, 0.2);
  const auto& three = r.pareto[3];
  EXPECT_FALSE(three.on_front);
  EXPECT_TRUE(three.compared);
  EXPECT_DOUBLE_EQ(three.seconds_per_step, 0.2);
  EXPECT_EQ(three.dominated_by, (std::vector<int64_t>{1, 2, 5}));
  EXPECT_FALSE(r.pareto[4].compared);
  EXPECT_NE(r.pareto[4].note.find("pruned"), std::string::npos);
  EXPECT_FALSE(r.pareto[5].compared);
}

TEST(Best, ModeMax) {
  using S = TrialState;
  const std::vector<BestTrial> ts = {
      trial(1, S::completed, {{100, 0.5}, {200, 0.7}}, {{100, 20}, {200, 40}}),
      trial(2, S::completed, {{100, 0.6}, {200, 0.65}}, {{100, 10}, {200, 20}}),
      trial(3, S::completed, {{100, 0.55}, {200, 0.6}}, {{100, 30}, {200, 60}}),
  };
  const auto r = rank_trials(ts, {"accuracy", "max"});
  EXPECT_EQ(ids(r.at_step), (std::vector<int64_t>{1, 2, 3}));
  // At 20 s trial 2 is done (0.65) while 1 is at step 100 (0.5) and 3 has nothing yet.
  EXPECT_DOUBLE_EQ(r.at_time.at, 20);
  EXPECT_EQ(ids(r.at_time), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(ranks(r.at_time), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_NE(r.at_time.entries[2].note.find("no value at or before"), std::string::npos);
  ASSERT_EQ(r.pareto.size(), 3u);
  EXPECT_EQ(r.pareto[0].trial, 2);
  EXPECT_TRUE(r.pareto[0].on_front);
  EXPECT_EQ(r.pareto[1].trial, 1);
  EXPECT_TRUE(r.pareto[1].on_front);
  EXPECT_EQ(r.pareto[2].trial, 3);
  EXPECT_FALSE(r.pareto[2].on_front);
  EXPECT_EQ(r.pareto[2].dominated_by, (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(rank_trials(ts, {"accuracy", "biggest"}), BestError);
}

TEST(Best, MissingDataAndNaN) {
  using S = TrialState;
  const std::vector<BestTrial> ts = {
      trial(1, S::completed, {{100, 3.0}, {200, 2.0}}),                  // no timing at all
      trial(2, S::completed, {{100, 2.5}, {200, kNaN}}, {{200, 50}}),    // ends on NaN
      trial(3, S::failed, {{100, 2.0}, {150, kNaN}}, {{150, 30}}),       // failed short of S
      trial(4, S::running, {{100, 1.0}, {200, 1.5}, {300, 1.4}}, {{300, 45}}),
  };
  const auto r = rank_trials(ts, {});
  EXPECT_EQ(r.at_step.at, 200);
  // Reached 200: 4 (1.5, running: ranked with a note), 1 (2.0), 2 (NaN: unranked).
  // Short of it: 3 (NaN last value: unranked).
  EXPECT_EQ(ids(r.at_step), (std::vector<int64_t>{4, 1, 2, 3}));
  EXPECT_EQ(ranks(r.at_step), (std::vector<int64_t>{1, 2, 0, 0}));
  EXPECT_NE(r.at_step.entries[0].note.find("running, at step 300"), std::string::npos);
  EXPECT_NE(r.at_step.entries[3].note.find("failed at step 150"), std::string::npos);
  // Wall-clock: trial 1 has none; the reference is trial 2 alone (50 s).
  EXPECT_DOUBLE_EQ(r.at_time.at, 50);
  EXPECT_EQ(ids(r.at_time), (std::vector<int64_t>{4, 2, 3, 1}));
  // Trial 4 (running) ends at 45 s, short of 50 s: ranked by its last value; trial 2 reached
  // 50 s but its value there is NaN.
  EXPECT_EQ(ranks(r.at_time), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(r.at_time.entries[0].step, 300);
  EXPECT_FALSE(r.at_time.entries[0].reached);
  EXPECT_NE(r.at_time.entries[3].note.find("no wall-clock data"), std::string::npos);
  for (const auto& p : r.pareto) EXPECT_FALSE(p.on_front) << p.trial;  // nothing comparable
  EXPECT_NE(r.pareto[0].note.find("no timing"), std::string::npos) << r.pareto[0].note;
}

TEST(Best, NoCompletedTrialYet) {
  using S = TrialState;
  const auto r = rank_trials({trial(1, S::running, {{100, 3.0}, {200, 2.0}}),
                              trial(2, S::running, {{100, 2.5}})},
                             {});
  EXPECT_EQ(r.at_step.at, 100);
  EXPECT_EQ(ids(r.at_step), (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(r.at_time.defined);
  EXPECT_TRUE(best_to_json(r)["at_time"]["seconds"].is_null());
}

TEST(Best, CompletedTrialsWithoutTiming) {
  using S = TrialState;
  const auto r = rank_trials({trial(1, S::completed, {{100, 2.0}}),
                              trial(2, S::pruned, {{100, 3.0}}, {{100, 9.0}})},
                             {});
  EXPECT_FALSE(r.at_time.defined) << "a pruned trial alone sets no common time";
  EXPECT_EQ(ranks(r.at_time), (std::vector<int64_t>{0, 0}));
  EXPECT_NE(format_best_table(r).find("(no wall-clock data for the trials to compare)"),
            std::string::npos);
}

TEST(Best, TableIsAligned) {
  const auto text = format_best_table(rank_trials(sweep(), {}));
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_GE(lines.size(), 20u);
  EXPECT_EQ(lines[0], "objective: val_loss (lower is better)");
  EXPECT_EQ(lines[2], "At equal steps (step 300):");
  EXPECT_EQ(lines[3], "rank  trial  val_loss  step  params  note");
  EXPECT_EQ(lines[4], "   1      1         2   300  lr=1");
  EXPECT_EQ(lines[6], "   3      2       2.3   250  lr=2");
  EXPECT_NE(text.find("At equal wall-clock (37.5 s):"), std::string::npos);
  EXPECT_NE(text.find("dominated by 1, 2, 5"), std::string::npos);
  EXPECT_NE(text.find("\n*          1         2   300   0.125  lr=1\n"), std::string::npos) << text;
}

TEST(Best, Json) {
  const auto j = best_to_json(rank_trials(sweep(), {}));
  EXPECT_EQ(j["metric"], "val_loss");
  EXPECT_EQ(j["at_step"]["step"], 300);
  EXPECT_EQ(j["at_step"]["entries"][0]["trial"], 1);
  EXPECT_EQ(j["at_step"]["entries"][0]["state"], "completed");
  EXPECT_TRUE(j["at_step"]["entries"][5]["value"].is_null());
  EXPECT_EQ(j["at_time"]["seconds"], 37.5);
  EXPECT_EQ(j["pareto"][3]["dominated_by"], nlohmann::json({1, 2, 5}));
  EXPECT_EQ(j["pareto"][0]["on_front"], true);
  EXPECT_TRUE(j["pareto"][5]["final_value"].is_null());
}

}  // namespace
}  // namespace precon::orch

namespace precon::orch {
namespace {

TEST(Best, RanksAtEqualCompute) {
  // A small model (1e9 FLOPs a step) trained 400 steps and a big one (4e9 a step) trained 100:
  // the big one leads at equal steps, the small one at equal compute (4e11 FLOPs each).
  using S = TrialState;
  std::vector<BestTrial> trials = {
      trial(1, S::completed, {{100, 3.0}, {200, 2.6}, {400, 2.2}}),
      trial(2, S::completed, {{50, 2.9}, {100, 2.5}}),
      trial(3, S::completed, {{100, 2.4}}),  // no flops reported: not compared at equal compute
  };
  trials[0].flops = {{100, 1e11}, {200, 2e11}, {400, 4e11}};
  trials[1].flops = {{50, 2e11}, {100, 4e11}};
  const BestReport r = rank_trials(trials, {});
  EXPECT_DOUBLE_EQ(r.at_step.at, 100);
  EXPECT_EQ(ids(r.at_step), (std::vector<int64_t>{3, 2, 1}));
  ASSERT_TRUE(r.at_flops.defined);
  EXPECT_DOUBLE_EQ(r.at_flops.at, 4e11);
  EXPECT_EQ(ids(r.at_flops), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ranks(r.at_flops), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(r.at_flops.entries[0].step, 400);
  EXPECT_DOUBLE_EQ(r.at_flops.entries[0].flops, 4e11);
  EXPECT_EQ(r.at_flops.entries[2].note, "no flops reported");
  // Between two recorded points the FLOPs are interpolated as the seconds are.
  trials[0].flops = {{200, 2e11}, {400, 4e11}};
  trials[0].objective = {{300, 2.3}, {400, 2.2}};
  trials[1].flops = {{100, 3e11}};
  const BestReport q = rank_trials(trials, {});
  EXPECT_DOUBLE_EQ(q.at_flops.at, 3e11);
  EXPECT_EQ(q.at_flops.entries[0].trial, 1);
  EXPECT_DOUBLE_EQ(q.at_flops.entries[0].value, 2.3);  // step 300 lies at 3e11 FLOPs
  const std::string table = format_best_table(r);
  EXPECT_NE(table.find("At equal compute (4e+11 FLOPs):"), std::string::npos) << table;
  const nlohmann::json j = best_to_json(r);
  EXPECT_DOUBLE_EQ(j["at_flops"]["flops"].get<double>(), 4e11);
  EXPECT_EQ(j["at_flops"]["entries"][0]["trial"], 1);
  EXPECT_DOUBLE_EQ(j["at_flops"]["entries"][0]["flops"].get<double>(), 4e11);
}

// The front and each trial's beaters against the pairwise definition, on random sweeps with
// ties on both axes, minimised and maximised.
TEST(Best, ParetoFrontMatchesThePairwiseDefinition) {
  for (const char* mode : {"min", "max"}) {
    std::mt19937 rng(7);
    std::vector<BestTrial> ts;
    const bool maximise = std::string(mode) == "max";
    for (int64_t id = 1; id <= 400; ++id) {
      // Slower trials tend to be better, so that the front holds many of them.
      const int slow = static_cast<int>(rng() % 30), noise = static_cast<int>(rng() % 8);
      const double seconds = 0.05 * (1 + slow);
      const double value = (maximise ? slow + noise : 30 - slow + noise) / 10.0;
      ts.push_back(trial(id, TrialState::completed, {{100, value}}, {}, {{100, seconds}}));
    }
    const BestReport r = rank_trials(ts, {"val_loss", mode});
    const bool max = maximise;
    const auto beats = [&](const ParetoEntry& b, const ParetoEntry& a) {
      const bool no_worse = (max ? b.final_value >= a.final_value : b.final_value <= a.final_value) &&
                            b.seconds_per_step <= a.seconds_per_step;
      return no_worse && (b.final_value != a.final_value || b.seconds_per_step < a.seconds_per_step);
    };
    ASSERT_EQ(r.pareto.size(), ts.size());
    size_t on_front = 0;
    for (const ParetoEntry& a : r.pareto) {
      std::vector<const ParetoEntry*> front_beaters;
      bool beaten = false;
      for (const ParetoEntry& b : r.pareto) {
        if (!beats(b, a)) continue;
        beaten = true;
        if (b.on_front) front_beaters.push_back(&b);
      }
      EXPECT_EQ(a.on_front, !beaten) << mode << " trial " << a.trial;
      on_front += a.on_front;
      // The fastest kMaxDominatedBy of the front's beaters, by id.
      std::stable_sort(front_beaters.begin(), front_beaters.end(), [](const ParetoEntry* x, const ParetoEntry* y) {
        return x->seconds_per_step < y->seconds_per_step;
      });
      std::vector<int64_t> want;
      for (size_t i = 0; i < front_beaters.size() && i < kMaxDominatedBy; ++i) want.push_back(front_beaters[i]->trial);
      std::sort(want.begin(), want.end());
      if (front_beaters.size() <= kMaxDominatedBy) {
        EXPECT_EQ(a.dominated_by, want) << mode << " trial " << a.trial;
      } else {
        EXPECT_EQ(a.dominated_by.size(), kMaxDominatedBy) << mode << " trial " << a.trial;
      }
      EXPECT_EQ(beaten, !a.dominated_by.empty()) << mode << " trial " << a.trial;
    }
    EXPECT_GT(on_front, 1u);
    EXPECT_LT(on_front, ts.size());
  }
}

// 100,000 compared trials rank at once (a pairwise front took hours).
TEST(Best, ParetoFrontOfAHundredThousandTrials) {
  std::vector<BestTrial> ts;
  for (int64_t id = 1; id <= 100000; ++id) {
    const double k = static_cast<double>(id * 7919 % 100000);
    ts.push_back(trial(id, TrialState::completed, {{100, 3 - k / 1e5}}, {}, {{100, 0.1 + k / 1e6}}));
  }
  ts.push_back(trial(100001, TrialState::completed, {{100, 5.0}}, {}, {{100, 1.0}}));  // beaten by all
  const BestReport r = rank_trials(ts, {});
  size_t on_front = 0;
  for (const ParetoEntry& p : r.pareto) on_front += p.on_front;
  EXPECT_EQ(on_front, 100000u);  // faster is worse: every trial but the last is on the front
  EXPECT_EQ(r.pareto.back().trial, 100001);
  EXPECT_EQ(r.pareto.back().dominated_by.size(), kMaxDominatedBy);
}

}  // namespace
}  // namespace precon::orch
