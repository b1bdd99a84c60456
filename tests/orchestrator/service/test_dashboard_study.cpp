// GET /api/v1/experiments/{id}/study over a real socket: a study seeded as a finished run leaves
// it (study_store_seed.h) answers the report's JSON (the same as study_report on the store), kept
// until the experiment's data changes; an experiment that is not a study answers 409 not_a_study,
// an unknown one 404; reads follow the controller's read rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/study/report.h"
#include "tests/orchestrator/support/study_store_seed.h"

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Losses on L = E + A (k C)^-alpha with k = 2 for Muon (its multiplier against AdamW is 2), the
// lr factor 1 best in every cell, the two seeds 0.4 % apart; Muon's compute 1.1× the model's.
SeededMetrics study_route_curve(const SeedCell& c) {
  const bool muon = c.arm == "muon";
  const double compute = muon ? 1.1 * c.model_flops : c.model_flops;
  const double penalty = 1 + 0.1 * std::pow(std::log2(c.lr_factor), 2);
  const double offset = c.seed == 0 ? -0.004 : 0.004;
  const double loss = (1.8 + 2000 * std::pow((muon ? 2 : 1) * compute, -0.3)) * penalty * std::exp(offset);
  return {loss, c.model_flops, muon ? compute : 0};
}

class StudyRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon_study_route_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    {
      // Seeded before the controller starts: it finds every trial ended and launches nothing.
      Store store(options().db);
      study_ = seed_study(store, kSeededStudyRecipe, study_route_curve).experiment;
      ExperimentRow e;
      e.name = "plain";
      e.state = ExperimentState::completed;
      e.created_at = 900;
      e.ended_at = 1000;
      TrialRow t;
      t.params_json = json{{"optimizer.lr", 0.01}}.dump();
      t.state = TrialState::completed;
      plain_ = store.create_experiment(e, {t});
    }
    start(options());
  }
  void TearDown() override {
    controller_.reset();
    fs::remove_all(dir_);
  }
  ControllerOptions options() const {
    ControllerOptions o;
    o.db = dir_ / "precon.db";
    o.run_root = dir_ / "runs";
    o.trainer = "/bin/false";  // every trial below has ended or never runs
    o.admin_token = "admin-secret";
    o.log = [](const std::string&) {};
    return o;
  }
  void start(const ControllerOptions& o) {
    controller_.reset();
    controller_ = std::make_unique<Controller>(o);
    controller_->start();
    url_ = controller_->url();
  }
  json get(const std::string& target, int expect, const std::string& token = "") {
    std::map<std::string, std::string> headers;
    if (!token.empty()) headers["Authorization"] = "Bearer " + token;
    ClientResponse r = http_request(url_, "GET", target, "", headers);
    EXPECT_EQ(r.status, expect) << target << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  static std::string study_path(int64_t id) { return "/api/v1/experiments/" + std::to_string(id) + "/study"; }

  fs::path dir_;
  std::unique_ptr<Controller> controller_;
  std::string url_;
  int64_t study_ = 0, plain_ = 0;
};

TEST_F(StudyRouteTest, AStudyAnswersItsReport) {
  const json j = get(study_path(study_), 200);
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["experiment"], study_);
  EXPECT_EQ(j["name"], "tiny-study");
  EXPECT_EQ(j["baseline"], "adamw");
  EXPECT_EQ(j["ok"], true) << j["reason"];
  EXPECT_TRUE(j["reason"].is_string());
  EXPECT_TRUE(j["warnings"].is_array());
  EXPECT_TRUE(j["E"].is_number());
  EXPECT_EQ(j["complete"], true);
  ASSERT_EQ(j["arms"].size(), 2u);
  for (const json& a : j["arms"]) {
    SCOPED_TRACE(a.dump());
    EXPECT_TRUE(a["arm"].is_string());
    for (const char* k : {"multiplier", "alpha", "E", "A", "rms_residual"}) EXPECT_TRUE(a[k].is_number()) << k;
    ASSERT_EQ(a["interval"].size(), 2u);
    EXPECT_LE(a["interval"][0].get<double>(), a["interval"][1].get<double>());
    EXPECT_EQ(a["multiplier_by_size"].size(), 3u);
  }
  EXPECT_EQ(j["arms"][0]["arm"], "adamw");
  EXPECT_EQ(j["arms"][1]["arm"], "muon");
  EXPECT_NEAR(j["arms"][1]["multiplier"].get<double>(), 2.0, 0.1);
  ASSERT_EQ(j["points"].size(), 36u);
  int winners = 0;
  for (const json& p : j["points"]) {
    for (const char* k : {"size", "seed", "trial"}) EXPECT_TRUE(p[k].is_number_integer()) << k << " " << p;
    for (const char* k : {"lr", "lr_factor", "compute", "device_seconds", "loss"}) EXPECT_TRUE(p[k].is_number()) << k << " " << p;
    EXPECT_TRUE(p["arm"].is_string());
    ASSERT_TRUE(p["winner"].is_boolean());
    winners += p["winner"].get<bool>();
    EXPECT_EQ(p["winner"], p["lr_factor"] == 1.0) << p;
  }
  EXPECT_EQ(winners, 12);  // 2 arms × 3 sizes × 2 seeds of the best lr
  ASSERT_EQ(j["sizes"].size(), 3u);
  for (const json& s : j["sizes"]) {
    EXPECT_TRUE(s["size"].is_number_integer());
    EXPECT_GT(s["params"].get<int64_t>(), 0);
    EXPECT_GT(s["tokens"].get<double>(), 0);
    EXPECT_GT(s["compute"].get<double>(), 0);
    EXPECT_EQ(s["winner"], "muon");
  }
  // What the CLI prints with --json, to the bit: the fit's bootstrap is seeded.
  EXPECT_EQ(j, study::study_report(controller_->store(), study_));
}

// The fit is computed once per version of the experiment's data, like `best`.
TEST_F(StudyRouteTest, TheReportIsKeptUntilItsExperimentChanges) {
  Store& store = controller_->store();
  BestCache cache;
  const ExperimentRow e = *store.experiment(study_);
  const auto first = cache.study(store, e);
  EXPECT_EQ(cache.study(store, e), first);
  cache.metrics_stored(plain_);
  EXPECT_EQ(cache.study(store, e), first);
  EXPECT_EQ(cache.studies_computed(), 1u);
  cache.metrics_stored(study_);
  EXPECT_NE(cache.study(store, e), first);
  EXPECT_EQ(cache.studies_computed(), 2u);
  cache.store_written("update_trial");
  cache.study(store, e);
  EXPECT_EQ(cache.studies_computed(), 3u);
  // Not a study: refused every time, nothing kept.
  const ExperimentRow plain = *store.experiment(plain_);
  EXPECT_THROW(cache.study(store, plain), std::invalid_argument);
  EXPECT_EQ(cache.studies_computed(), 3u);
  // Asked twice over the socket, the answer is the same.
  EXPECT_EQ(get(study_path(study_), 200), get(study_path(study_), 200));
}

TEST_F(StudyRouteTest, AnExperimentThatIsNotAStudyAnswers409) {
  const json j = get(study_path(plain_), 409);
  EXPECT_EQ(j["error"]["code"], "not_a_study");
  const std::string message = j["error"]["message"];
  EXPECT_NE(message.find("is not a study"), std::string::npos) << message;
}

TEST_F(StudyRouteTest, AnUnknownExperimentAnswers404) {
  const json j = get(study_path(study_ + plain_ + 100), 404);
  EXPECT_EQ(j["error"]["code"], "not_found");
  get("/api/v1/experiments/abc/study", 400);
}

TEST_F(StudyRouteTest, ReadsNeedATokenWhenTheyAreNotPublic) {
  ControllerOptions o = options();
  o.reads = "token";
  o.read_token = "reader-secret";
  start(o);
  EXPECT_EQ(get(study_path(study_), 401)["error"]["code"], "unauthorized");
  EXPECT_EQ(get(study_path(study_), 200, "reader-secret")["experiment"], study_);
  get(study_path(study_), 200, "admin-secret");
}

}  // namespace
}  // namespace precon::orch::testing
