// The dashboard's routes (routes_dashboard.cpp) over a real socket, against rows and metric
// points written straight into the store with known values; and the dashboard's files served
// at `/`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/controller.h"

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class DashboardRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon_dash_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ControllerOptions o;
    o.db = dir_ / "precon.db";
    o.run_root = dir_ / "runs";
    o.web_dir = fs::path(PRECON_SOURCE_DIR) / "web";
    o.trainer = "/bin/false";  // every trial below has ended: nothing is launched
    o.admin_token = "admin-secret";
    o.log = [](const std::string&) {};
    controller_ = std::make_unique<Controller>(o);
    seed(controller_->store());
    controller_->start();
    url_ = controller_->url();
  }
  void TearDown() override {
    controller_.reset();
    fs::remove_all(dir_);
  }

  // Three ended trials of one experiment (objective val_loss, min):
  //   t1 a=1 b="x": val_loss 3.0, 2.0, 2.5 at steps 10, 20, 30; train_loss 5 - 0.01 step for
  //      steps 1..100 at time 1000 + step/2; tokens_per_second 1234; ran 1000..1100.
  //   t2 a=2 b="y": val_loss 1.5 at step 10; train_loss 4 for steps 1..50; ran 1050..1080.
  //   t3 a=3 b="y": cancelled before it started, no metrics.
  void seed(Store& s) {
    ExperimentRow e;
    e.name = "dash";
    e.state = ExperimentState::completed;
    e.objective_metric = "val_loss";
    e.objective_mode = "min";
    e.created_at = 900;
    e.ended_at = 1200;
    std::vector<TrialRow> rows;
    for (int i = 0; i < 3; ++i) {
      TrialRow t;
      t.index = i;
      t.params_json = json{{"a", i + 1}, {"b", i == 0 ? "x" : "y"}}.dump();
      t.state = i == 2 ? TrialState::cancelled : TrialState::completed;
      t.created_at = 900;
      rows.push_back(t);
    }
    exp_ = s.create_experiment(e, rows);
    std::vector<TrialRow> trials = s.trials(exp_);
    t1_ = trials[0].id;
    t2_ = trials[1].id;
    t3_ = trials[2].id;
    trials[0].started_at = 1000;
    trials[0].ended_at = 1100;
    trials[1].started_at = 1050;
    trials[1].ended_at = 1080;
    for (TrialRow& t : trials) s.update_trial(t);
    std::vector<MetricPoint> p1 = {{"val_loss", 10, 3.0, 1005}, {"val_loss", 20, 2.0, 1010}, {"val_loss", 30, 2.5, 1015},
                                   {"tokens_per_second", 100, 1234, 1050}};
    for (int step = 1; step <= 100; ++step) p1.push_back({"train_loss", step, 5 - 0.01 * step, 1000 + step / 2.0});
    s.insert_metrics(t1_, p1);
    std::vector<MetricPoint> p2 = {{"val_loss", 10, 1.5, 1060}};
    for (int step = 1; step <= 50; ++step) p2.push_back({"train_loss", step, 4.0, 1050 + step / 2.0});
    s.insert_metrics(t2_, p2);
  }

  json get(const std::string& target, int expect = 200) {
    ClientResponse r = http_request(url_, "GET", target);
    EXPECT_EQ(r.status, expect) << target << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  std::string curves(const std::string& query) { return "/api/v1/dashboard/experiments/" + std::to_string(exp_) + "/curves" + query; }

  fs::path dir_;
  std::unique_ptr<Controller> controller_;
  std::string url_;
  int64_t exp_ = 0, t1_ = 0, t2_ = 0, t3_ = 0;
};

TEST_F(DashboardRoutes, ExperimentsListHasTheBestObjectiveStartAndDuration) {
  json j = get("/api/v1/dashboard/experiments");
  ASSERT_EQ(j["experiments"].size(), 1u);
  const json& e = j["experiments"][0];
  EXPECT_EQ(e["name"], "dash");
  EXPECT_EQ(e["state"], "completed");
  EXPECT_EQ(e["trial_states"]["completed"], 2);
  EXPECT_EQ(e["trial_states"]["cancelled"], 1);
  EXPECT_DOUBLE_EQ(e["objective_best"].get<double>(), 1.5);
  EXPECT_EQ(e["objective_best_trial"], t2_);
  EXPECT_DOUBLE_EQ(e["started_at"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(e["seconds"].get<double>(), 200);
}

TEST_F(DashboardRoutes, ExperimentHasSweptKeysAndTrialRows) {
  json j = get("/api/v1/dashboard/experiments/" + std::to_string(exp_));
  EXPECT_EQ(j["swept"], json::array({"a", "b"}));
  ASSERT_EQ(j["trial_rows"].size(), 3u);
  const json& r1 = j["trial_rows"][0];
  EXPECT_EQ(r1["id"], t1_);
  EXPECT_DOUBLE_EQ(r1["objective_best"].get<double>(), 2.0);
  EXPECT_EQ(r1["objective_best_step"], 20);
  EXPECT_DOUBLE_EQ(r1["objective_last"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(r1["train_loss"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(r1["tokens_per_second"].get<double>(), 1234);
  EXPECT_DOUBLE_EQ(r1["seconds"].get<double>(), 100);
  EXPECT_EQ(r1["last_step"], 100);
  const json& r3 = j["trial_rows"][2];
  EXPECT_EQ(r3["state"], "cancelled");
  EXPECT_TRUE(r3["objective_best"].is_null());
  EXPECT_TRUE(r3["seconds"].is_null());
  get("/api/v1/dashboard/experiments/999", 404);
}

TEST_F(DashboardRoutes, CurvesShareOneStepGrid) {
  // 100 bins over steps 1..100: one step per bin, the raw values.
  json j = get(curves("?name=train_loss&points=100&trials=" + std::to_string(t1_) + "," + std::to_string(t2_)));
  EXPECT_EQ(j["x"], "step");
  ASSERT_EQ(j["grid"].size(), 100u);
  EXPECT_EQ(j["grid"][0], 1);
  EXPECT_EQ(j["grid"][99], 100);
  ASSERT_EQ(j["trials"].size(), 2u);
  const json& a = j["trials"][0]["values"];
  const json& b = j["trials"][1]["values"];
  EXPECT_EQ(j["trials"][0]["id"], t1_);
  EXPECT_NEAR(a[0].get<double>(), 4.99, 1e-12);
  EXPECT_NEAR(a[99].get<double>(), 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(b[49].get<double>(), 4.0);
  EXPECT_TRUE(b[50].is_null());
  // 10 bins of 10 steps: bin means.
  j = get(curves("?points=10&trials=" + std::to_string(t1_)));
  ASSERT_EQ(j["grid"].size(), 10u);
  EXPECT_EQ(j["grid"][1], 11);
  const double first_bin = j["trials"][0]["values"][0].get<double>();
  EXPECT_GT(first_bin, 4.9);
  EXPECT_LT(first_bin, 4.99);
  // Every trial by default; the one without points has only nulls.
  j = get(curves("?points=100"));
  ASSERT_EQ(j["trials"].size(), 3u);
  for (const json& v : j["trials"][2]["values"]) EXPECT_TRUE(v.is_null());
}

TEST_F(DashboardRoutes, CurvesAgainstSecondsSinceTheTrialStarted) {
  json j = get(curves("?x=time&points=200&trials=" + std::to_string(t1_)));
  EXPECT_EQ(j["x"], "time");
  ASSERT_GT(j["grid"].size(), 50u);
  // Step s is at s/2 seconds after the start (1000): from 0.5 s to 50 s.
  EXPECT_GE(j["grid"][0].get<double>(), 0.5);
  EXPECT_LE(j["grid"].back().get<double>(), 50.0);
  EXPECT_NEAR(j["trials"][0]["values"][0].get<double>(), 4.99, 1e-12);
}

TEST_F(DashboardRoutes, BadCurveQueriesSayWhatIsWrong) {
  auto message = [](const json& j) { return j["error"]["message"].get<std::string>(); };
  EXPECT_NE(message(get(curves("?x=epoch"), 400)).find("x must be step or time"), std::string::npos);
  EXPECT_NE(message(get(curves("?points=1"), 400)).find("points"), std::string::npos);
  EXPECT_NE(message(get(curves("?trials=abc"), 400)).find("\"abc\""), std::string::npos);
  EXPECT_NE(message(get(curves("?trials=" + std::to_string(t1_) + ",99999"), 400)).find("trial 99999 is not in experiment"),
            std::string::npos);
  get("/api/v1/dashboard/experiments/12345/curves", 404);
}

TEST_F(DashboardRoutes, ServesTheDashboardAtTheRoot) {
  ClientResponse r = http_request(url_, "GET", "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("<script type=\"module\" src=\"app.js\">"), std::string::npos);
  r = http_request(url_, "GET", "/app.js");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("/api/v1/events"), std::string::npos);
}

}  // namespace
}  // namespace precon::orch::testing
