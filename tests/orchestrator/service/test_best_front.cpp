// Several objectives: GET /api/v1/experiments/{id}/best over a real socket answers the Pareto
// front of the trials' final values (rank 1 flagged on_front, rank 2 behind it, a trial lacking an
// objective listed with a note), the experiment's view lists the objectives, and `precon best`'s
// table starts with the front. The front itself (objective_front) on hand-made trials.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/best.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "tests/orchestrator/support/route_fixture.h"

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(BestFront, RanksByNonDomination) {
  BestSettings s;
  s.metric = "loss";
  s.metrics = {"loss", "acc"};
  s.modes = {"min", "max"};
  auto trial = [](int64_t id, TrialState state, std::vector<double> finals) {
    BestTrial t;
    t.id = id;
    t.state = state;
    t.finals = std::move(finals);
    return t;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // (loss, acc): 1 and 2 trade off (front); 3 is beaten by 1; 4 by 3; 5 has no acc; 6 is running.
  const std::vector<FrontEntry> f = objective_front({trial(1, TrialState::completed, {1.0, 0.9}),
                                                     trial(2, TrialState::completed, {0.5, 0.6}),
                                                     trial(3, TrialState::completed, {1.5, 0.8}),
                                                     trial(4, TrialState::completed, {2.0, 0.7}),
                                                     trial(5, TrialState::completed, {0.1, nan}),
                                                     trial(6, TrialState::running, {0.1, 0.99})},
                                                    s);
  ASSERT_EQ(f.size(), 6u);
  const std::vector<std::pair<int64_t, int64_t>> want = {{1, 1}, {2, 1}, {3, 2}, {4, 3}, {5, 0}, {6, 0}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(f[i].trial, want[i].first) << i;
    EXPECT_EQ(f[i].rank, want[i].second) << i;
    EXPECT_EQ(f[i].on_front, want[i].second == 1) << i;
  }
  EXPECT_EQ(f[4].note, "no value of acc");
  EXPECT_EQ(f[5].note, "not compared: running");
  // One objective: no front.
  BestSettings one;
  EXPECT_TRUE(objective_front({trial(1, TrialState::completed, {1.0, 2.0})}, one).empty());
}

class BestFrontRoute : public RouteFixture {
 protected:
  void SetUp() override {
    RouteFixture::SetUp();
    {
      Store store(db());
      ExperimentRow e;
      e.name = "two";
      e.recipe_text = "[train]\nsteps = 10\n";
      e.overrides_json = "[]";
      e.state = ExperimentState::completed;
      e.objective_metric = "val_loss";
      e.objective_mode = "min";
      e.early_stop_json = R"({"method":"none","objectives":[{"metric":"val_loss","mode":"min"},)"
                          R"({"metric":"compute_flops","mode":"min"}]})";
      std::vector<TrialRow> rows;
      for (int i = 0; i < 4; ++i) {
        TrialRow t;
        t.index = i;
        t.params_json = json{{"x", i}}.dump();
        t.state = TrialState::completed;
        rows.push_back(t);
      }
      exp_ = store.create_experiment(e, rows);
      // (val_loss, compute_flops): 0 and 1 trade off, 2 is beaten by 1, 3 reported no FLOPs.
      const double values[4][2] = {{1.0, 10.0}, {2.0, 5.0}, {3.0, 6.0}, {0.5, -1}};
      const std::vector<TrialRow> trials = store.trials(exp_);
      for (size_t i = 0; i < trials.size(); ++i) {
        std::vector<MetricPoint> points = {{"val_loss", 10, values[i][0], 1.0}};
        if (values[i][1] > 0) points.push_back({"compute_flops", 10, values[i][1], 1.0});
        store.insert_metrics(trials[i].id, points);
        ids_.push_back(trials[i].id);
      }
    }
    start();
  }

  int64_t exp_ = 0;
  std::vector<int64_t> ids_;
};

TEST_F(BestFrontRoute, BestAnswersTheFront) {
  const json j = get("/api/v1/experiments/" + std::to_string(exp_) + "/best");
  ASSERT_TRUE(j.contains("objectives")) << j.dump();
  EXPECT_EQ(j["objectives"]["metrics"], json({"val_loss", "compute_flops"}));
  EXPECT_EQ(j["objectives"]["modes"], json({"min", "min"}));
  const json& front = j["objectives"]["front"];
  ASSERT_EQ(front.size(), 4u) << front.dump();
  EXPECT_EQ(front[0]["trial"], ids_[0]);
  EXPECT_EQ(front[0]["rank"], 1);
  EXPECT_EQ(front[0]["on_front"], true);
  EXPECT_EQ(front[0]["values"], json({1.0, 10.0}));
  EXPECT_EQ(front[1]["trial"], ids_[1]);
  EXPECT_EQ(front[1]["on_front"], true);
  EXPECT_EQ(front[2]["trial"], ids_[2]);
  EXPECT_EQ(front[2]["rank"], 2);
  EXPECT_EQ(front[2]["on_front"], false);
  EXPECT_EQ(front[3]["trial"], ids_[3]);
  EXPECT_TRUE(front[3]["rank"].is_null());
  EXPECT_EQ(front[3]["note"], "no value of compute_flops");
  // The experiment's view lists the objectives.
  const json e = get("/api/v1/experiments/" + std::to_string(exp_));
  EXPECT_EQ(e["objective"]["metrics"], json({"val_loss", "compute_flops"})) << e.dump();
  // `precon best`'s table begins with the front.
  Store store(dir_ / "precon.db");
  const std::string table = format_best_table(best_report(store, *store.experiment(exp_)));
  EXPECT_EQ(table.rfind("objectives: val_loss (min), compute_flops (min)", 0), 0u) << table;
}

}  // namespace
}  // namespace precon::orch::testing
