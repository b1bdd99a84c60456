// The dashboard's routes (routes_dashboard.cpp) over a real socket, against rows and metric
// points written straight into the store with known values; the dashboard's files served at `/`;
// pages of the long lists, the kept `best` report, and who may read what (read token, paths).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/api.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/views.h"
#include "tests/orchestrator/support/route_fixture.h"

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class DashboardRoutes : public RouteFixture {
 protected:
  void SetUp() override {
    RouteFixture::SetUp();
    start();
    seed(controller_->store());
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

  std::string curves(const std::string& query) { return "/api/v1/dashboard/experiments/" + std::to_string(exp_) + "/curves" + query; }

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

// An experiment of n ended trials written straight into the store, each with params {"i": index};
// its id and its trial ids in sweep order.
std::pair<int64_t, std::vector<int64_t>> dash_big_experiment(Store& store, int n) {
  ExperimentRow e;
  e.name = "big";
  e.state = ExperimentState::completed;
  e.objective_metric = "val_loss";
  e.objective_mode = "min";
  e.run_root = "/srv/precon/runs";
  e.created_at = 900;
  std::vector<TrialRow> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    rows[static_cast<size_t>(i)].index = i;
    rows[static_cast<size_t>(i)].params_json = json{{"i", i}}.dump();
    rows[static_cast<size_t>(i)].state = TrialState::completed;
    rows[static_cast<size_t>(i)].created_at = 900;
  }
  const int64_t id = store.create_experiment(e, rows);
  std::vector<int64_t> ids;
  for (const TrialRow& t : store.trials(id)) ids.push_back(t.id);
  return {id, ids};
}

std::string error_message(const json& error) { return error["error"]["message"].get<std::string>(); }

// Walking a list page by page (next_cursor) gives every trial exactly once, in sweep order.
TEST_F(DashboardRoutes, CursorsWalkEveryTrialExactlyOnce) {
  const auto [big, ids] = dash_big_experiment(controller_->store(), 2345);
  const std::string e = std::to_string(big);
  for (const auto& [route, list] : std::vector<std::pair<std::string, std::string>>{
           {"/api/v1/experiments/" + e + "/trials", "trials"},
           {"/api/v1/dashboard/experiments/" + e, "trial_rows"},
           {"/api/v1/experiments/" + e, "trial_list"}}) {
    SCOPED_TRACE(route);
    std::vector<int64_t> seen;
    std::vector<size_t> sizes;
    json cursor = nullptr;
    do {
      const json page = get(route + "?limit=1000" + (cursor.is_null() ? "" : "&cursor=" + cursor.dump()));
      ASSERT_TRUE(page[list].is_array()) << page.dump().substr(0, 300);
      sizes.push_back(page[list].size());
      for (const json& row : page[list]) seen.push_back(row["id"].get<int64_t>());
      cursor = page["next_cursor"];
    } while (!cursor.is_null() && sizes.size() < 10);
    EXPECT_EQ(sizes, (std::vector<size_t>{1000, 1000, 345}));
    EXPECT_EQ(seen, ids);
  }
  // Without limit: the default page; past the end: nothing.
  const json first = get("/api/v1/experiments/" + e + "/trials");
  EXPECT_EQ(first["trials"].size(), kDefaultPage);
  EXPECT_FALSE(first["next_cursor"].is_null());
  const json past = get("/api/v1/experiments/" + e + "/trials?cursor=99999");
  EXPECT_TRUE(past["trials"].empty());
  EXPECT_TRUE(past["next_cursor"].is_null());
  const json dash = get("/api/v1/dashboard/experiments/" + e + "?limit=2&cursor=7");
  EXPECT_EQ(dash["swept"], json::array({"i"}));
  EXPECT_EQ(dash["trial_rows"][0]["params"]["i"], 7);
  EXPECT_EQ(dash["next_cursor"], 9);
}

TEST_F(DashboardRoutes, BadPageParametersSayWhatIsAllowed) {
  const std::string trials = "/api/v1/experiments/" + std::to_string(exp_) + "/trials";
  for (const char* limit : {"0", "5001", "abc", "-1", "1e3", ""}) {
    const json j = get(trials + "?limit=" + limit, 400);
    EXPECT_EQ(j["error"]["code"], "bad_param");
    EXPECT_EQ(error_message(j), std::string("limit must be an integer from 1 to 5000, got \"") + limit + "\"");
  }
  for (const char* cursor : {"abc", "-5", "1.5", ""}) {
    const json j = get("/api/v1/dashboard/experiments/" + std::to_string(exp_) + "?cursor=" + cursor, 400);
    EXPECT_EQ(error_message(j), std::string("cursor must be the next_cursor of the previous page (a non-negative integer), got \"") +
                              cursor + "\"");
  }
  get("/api/v1/experiments/" + std::to_string(exp_) + "/best?limit=0", 400);
}

// /best's lists come in pages too (the cursor is an offset), and the pages join to the whole.
TEST_F(DashboardRoutes, BestPagesJoinToTheWholeReport) {
  const std::string best = "/api/v1/experiments/" + std::to_string(exp_) + "/best";
  const json whole = get(best);
  EXPECT_TRUE(whole["next_cursor"].is_null());
  ASSERT_EQ(whole["pareto"].size(), 3u);
  json joined = json::array();
  json cursor = nullptr;
  int pages = 0;
  do {
    const json page = get(best + "?limit=1" + (cursor.is_null() ? "" : "&cursor=" + cursor.dump()));
    EXPECT_LE(page["at_step"]["entries"].size(), 1u);
    EXPECT_EQ(page["pareto"].size(), 1u);
    for (const json& entry : page["at_step"]["entries"]) joined.push_back(entry);
    cursor = page["next_cursor"];
  } while (!cursor.is_null() && ++pages < 10);
  EXPECT_EQ(pages, 2);  // three pages: cursors null, 1, 2
  EXPECT_EQ(joined, whole["at_step"]["entries"]);
  EXPECT_EQ(whole["at_step"]["entries"][0]["trial"], t2_);  // val_loss 1.5 beats 2.0
}

// The report is kept until the store changes under it: writes other than metric points end every
// kept report, metric points end their experiment's.
TEST_F(DashboardRoutes, BestReportIsKeptUntilItsExperimentChanges) {
  Store& store = controller_->store();
  BestCache cache;
  const ExperimentRow e = *store.experiment(exp_);
  const auto first = cache.report(store, e);
  EXPECT_EQ(cache.report(store, e), first);
  cache.store_written("insert_metrics");
  cache.metrics_stored(exp_ + 1000);
  EXPECT_EQ(cache.report(store, e), first);
  EXPECT_EQ(cache.computed(), 1u);
  // New points make trial 3 the best; told of them, the next report has it.
  store.insert_metrics(t3_, {{"val_loss", 10, 0.5, 1100}});
  cache.metrics_stored(exp_);
  const auto second = cache.report(store, e);
  EXPECT_EQ(cache.computed(), 2u);
  ASSERT_FALSE(second->at_step.entries.empty());
  EXPECT_EQ(second->at_step.entries[0].trial, t3_);
  cache.store_written("update_trial");
  EXPECT_NE(cache.report(store, e), second);
  EXPECT_EQ(cache.computed(), 3u);
}

// The experiments list's best objective is kept the same way, one query of the store each time;
// NaN and infinities are never the best, and equal values go to the first trial.
TEST_F(DashboardRoutes, ObjectiveBestIsKeptUntilItsExperimentChanges) {
  Store& store = controller_->store();
  store.insert_metrics(t3_, {{"val_loss", 5, -INFINITY, 1100}, {"val_loss", 6, NAN, 1101}, {"val_loss", 7, INFINITY, 1102}});
  BestCache cache;
  ExperimentRow e = *store.experiment(exp_);
  const uint64_t before = store.metric_reads();
  std::optional<TrialMetricPoint> best = cache.objective_best(store, e);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->trial_id, t2_);
  EXPECT_EQ(best->point.step, 10);
  EXPECT_EQ(best->point.value, 1.5);
  cache.store_written("insert_metrics");
  cache.metrics_stored(exp_ + 1000);
  EXPECT_EQ(cache.objective_best(store, e)->trial_id, t2_);
  EXPECT_EQ(store.metric_reads() - before, 1u);
  store.insert_metrics(t1_, {{"val_loss", 40, 1.5, 1020}});
  cache.metrics_stored(exp_);
  best = cache.objective_best(store, e);
  EXPECT_EQ(best->trial_id, t1_);
  EXPECT_EQ(best->point.step, 40);
  e.objective_mode = "max";
  cache.store_written("update_trial");
  best = cache.objective_best(store, e);
  EXPECT_EQ(best->trial_id, t1_);
  EXPECT_EQ(best->point.value, 3.0);
  EXPECT_EQ(store.metric_reads() - before, 3u);
  e.objective_metric = "no_such_metric";
  cache.store_written("update_trial");
  EXPECT_FALSE(cache.objective_best(store, e));
}

TEST_F(DashboardRoutes, ReadsNeedATokenWhenTheyAreNotPublic) {
  ControllerOptions o = options();
  o.reads = "token";
  o.read_token = "reader-secret";
  start(o);
  const std::string e = std::to_string(exp_);
  for (const std::string& route : std::vector<std::string>{"/api/v1/experiments", "/api/v1/experiments/" + e, "/api/v1/experiments/" + e + "/trials",
                                  "/api/v1/experiments/" + e + "/best", "/api/v1/trials/" + std::to_string(t1_),
                                  "/api/v1/trials/" + std::to_string(t1_) + "/metrics", "/api/v1/events",
                                  "/api/v1/dashboard/experiments", "/api/v1/dashboard/experiments/" + e}) {
    SCOPED_TRACE(route);
    const json refused = get(route, 401);
    EXPECT_EQ(refused["error"]["code"], "unauthorized");
    EXPECT_NE(error_message(refused).find("reads on this controller need a token"), std::string::npos) << refused.dump();
    EXPECT_NE(error_message(get(route, 401, "guess")).find("neither this controller's read token nor its admin token"),
              std::string::npos);
    get(route, 200, "reader-secret");
    get(route, 200, "admin-secret");
  }
  // The read token changes nothing; health, metrics and the dashboard's files need none.
  ClientResponse r = http_request(url_, "POST", "/api/v1/trials/" + std::to_string(t1_) + "/cancel", "{}",
                                  {{"Authorization", "Bearer reader-secret"}});
  EXPECT_EQ(r.status, 401) << r.body;
  for (const char* open : {"/healthz", "/metrics", "/", "/app.js"}) EXPECT_EQ(http_request(url_, "GET", open).status, 200) << open;
  // "auto" on a loopback bind: public.
  o.reads = "auto";
  start(o);
  get("/api/v1/experiments");
  EXPECT_TRUE(controller_->public_reads());
  o.reads = "sometimes";
  EXPECT_THROW(Controller{o}, std::invalid_argument);
}

TEST(RemoteView, PathsFromTheRunRootAndNoRecipeOrConfig) {
  EXPECT_EQ(path_from_run_root("/srv/precon/runs/trial-12"), "trial-12");
  EXPECT_EQ(path_from_run_root("/srv/precon/runs/trial-12/step_00000100"), "trial-12/step_00000100");
  EXPECT_EQ(path_from_run_root("/a/trial-1/b/trial-22/c"), "trial-22/c");
  EXPECT_EQ(path_from_run_root("/a/trial-x/c"), "c");
  json view = {{"run_root", "/srv/precon/runs"},
               {"recipe_path", "/home/me/recipes/q.toml"},
               {"recipe", "[experiment]\nname = \"q\""},
               {"trial_list", {{{"id", 1}, {"run_dir", "/srv/precon/runs/trial-1"}, {"config", "[data]\ntrain = \"/x\""}}}},
               {"checkpoints", {{{"path", "/srv/precon/runs/trial-1/step_00000010"}, {"step", 10}}}}};
  remote_view(view);
  const json want = {{"run_root", "runs"},
                     {"recipe_path", "q.toml"},
                     {"recipe", nullptr},
                     {"trial_list", {{{"id", 1}, {"run_dir", "trial-1"}, {"config", nullptr}}}},
                     {"checkpoints", {{{"path", "trial-1/step_00000010"}, {"step", 10}}}}};
  EXPECT_EQ(view, want);
  Request req;
  req.remote = "10.1.2.3:40000";
  EXPECT_FALSE(host_view(req));
  req.token_holder = true;
  EXPECT_TRUE(host_view(req));
  for (const char* local : {"127.0.0.1:5", "::1:5", "::ffff:127.0.0.1:5"}) {
    Request l;
    l.remote = local;
    EXPECT_TRUE(host_view(l)) << local;
  }
}

// This machine's first address other than loopback, "" when it has none.
std::string dash_non_loopback_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (std::string(text).rfind("127.", 0) != 0) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// Over a socket from an address other than loopback, public reads show no host path, recipe or
// config; the admin token shows them.
TEST_F(DashboardRoutes, ReadersOnOtherMachinesSeeNoHostPaths) {
  const std::string address = dash_non_loopback_address();
  if (address.empty()) GTEST_SKIP() << "no address other than loopback on this machine";
  const auto [big, ids] = dash_big_experiment(controller_->store(), 2);
  ControllerOptions o = options();
  o.bind = "0.0.0.0";
  o.reads = "public";
  start(o);
  url_ = "http://" + address + ":" + std::to_string(controller_->port());
  const std::string e = std::to_string(big);
  const json shown = get("/api/v1/experiments/" + e);
  EXPECT_EQ(shown["run_root"], "runs");
  EXPECT_TRUE(shown["recipe"].is_null());
  EXPECT_EQ(shown["trial_list"][0]["run_dir"], "trial-" + std::to_string(ids[0]));
  EXPECT_TRUE(get("/api/v1/trials/" + std::to_string(ids[1]))["config"].is_null());
  EXPECT_EQ(get("/api/v1/dashboard/experiments/" + e)["trial_rows"][1]["run_dir"], "trial-" + std::to_string(ids[1]));
  const json host = get("/api/v1/experiments/" + e, 200, "admin-secret");
  EXPECT_EQ(host["run_root"], "/srv/precon/runs");
  EXPECT_EQ(host["trial_list"][0]["run_dir"], "/srv/precon/runs/trial-" + std::to_string(ids[0]));
}

}  // namespace
}  // namespace precon::orch::testing
