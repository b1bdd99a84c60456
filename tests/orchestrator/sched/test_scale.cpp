// A controller holding one sweep at the size cap (100,000 trials): it submits, lists, restarts,
// cancels and stops, and the work each step does does not grow with the trials it holds. No
// timings are asserted: the work is counted (store writes by operation, metric reads, cache
// evictions), and a generous deadline only guards against a hang.
#include <gtest/gtest.h>

#include <future>
#include <string>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/store/series_cache.h"
#include "tests/orchestrator/support/controller_fixture.h"
#include "tests/orchestrator/support/prometheus_util.h"
#include "tests/orchestrator/support/store_fixture.h"
#include "tests/common/test_util.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::parse_exposition;

// Runs fn on another thread and fails the test if it has not returned within `limit`: a hang
// guard for steps that take well under a second when nothing is wrong.
template <class Fn>
void within(const char* what, std::chrono::seconds limit, Fn fn) {
  auto done = std::async(std::launch::async, fn);
  if (done.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not finish within " << limit.count() << " s";
    std::abort();  // the step is stuck: nothing after it can run (ctest reports the abort)
  }
  done.get();
}

TEST(SeriesCacheScale, EachEvictionDropsOneSeries) {
  // More series than the cache keeps, each read once: every eviction step drops exactly one
  // series (the least recently used), so the work is linear in the reads, not quadratic.
  SeriesCache cache(1000);
  const int64_t n = 3 * static_cast<int64_t>(SeriesCache::kMaxSeries);
  for (int64_t i = 0; i < n; ++i) {
    auto r = cache.read({i, 1}, [](Series& s) {
      s.steps = {0};
      s.values = {1.0};
      s.times = {0.0};
    });
    ASSERT_EQ(r.series().steps.size(), 1u);
  }
  EXPECT_EQ(cache.cached_points(), 1000u);
  EXPECT_EQ(cache.cached_series(), 1000u);
  EXPECT_EQ(cache.eviction_steps(), static_cast<uint64_t>(n - 1000));
  // Empty series are bounded by count instead.
  SeriesCache empty(1000);
  for (int64_t i = 0; i < static_cast<int64_t>(SeriesCache::kMaxSeries) + 500; ++i) empty.read({i, 2}, [](Series&) {});
  EXPECT_EQ(empty.cached_series(), SeriesCache::kMaxSeries);
  EXPECT_EQ(empty.eviction_steps(), 500u);
}

TEST(SeriesCacheScale, LeastRecentlyReadGoesFirst) {
  SeriesCache cache(20);
  int loads = 0;
  auto ten = [&](Series& s) {
    ++loads;
    for (int i = 0; i < 10; ++i) s.steps.push_back(i), s.values.push_back(i), s.times.push_back(0);
  };
  cache.read({1, 1}, ten);
  cache.read({2, 1}, ten);
  cache.read({1, 1}, ten);  // 1 is now the most recent
  cache.read({3, 1}, ten);  // over budget: 2 goes
  EXPECT_EQ(loads, 3);
  cache.read({1, 1}, ten);
  EXPECT_EQ(loads, 3);
  cache.read({2, 1}, ten);  // loaded again; 3 goes (1 was read after it)
  EXPECT_EQ(loads, 4);
  cache.read({1, 1}, ten);
  EXPECT_EQ(loads, 4);
  cache.apply({1, 1}, std::vector<SeriesPoint>{{10, 1, 0}, {11, 1, 0}});  // grows past the budget: 2 goes
  EXPECT_EQ(cache.cached_points(), 12u);
  cache.read({2, 1}, ten);
  EXPECT_EQ(loads, 5);
}

TEST(SweepCap, KeyTableRangeIsTheCap) {
  // sweep.samples' range lives in the worker's key table; the cap lives here. They must agree.
  const std::string base = "[sweep]\nmethod = \"random\"\nsamples = ";
  const std::string params = "\n[sweep.parameters]\n\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2] }\n";
  Recipe ok = parse_recipe_text(base + std::to_string(kMaxSweepTrials) + params, "cap.toml");
  EXPECT_EQ(sweep_size(ok), kMaxSweepTrials);
  try {
    parse_recipe_text(base + std::to_string(kMaxSweepTrials + 1) + params, "cap.toml");
    FAIL() << "samples over the cap accepted";
  } catch (const worker::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.samples"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(kMaxSweepTrials)), std::string::npos) << e.what();
  }
}

using StoreScale = testing::StoreTest;

TEST_F(StoreScale, CancelPendingEndsOnlyPendingTrialsWithAnEventEach) {
  Store s(path_);
  ExperimentRow e;
  e.name = "big";
  e.run_root = (dir_ / "runs").string();
  std::vector<TrialRow> rows(5000);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].index = static_cast<int64_t>(i);
  const int64_t id = s.create_experiment(e, rows);
  ExperimentRow other = e;
  other.name = "other";
  std::vector<TrialRow> others(3);
  for (size_t i = 0; i < others.size(); ++i) others[i].index = static_cast<int64_t>(i);
  const int64_t other_id = s.create_experiment(other, others);
  std::vector<TrialRow> trials = s.trials(id);
  ASSERT_EQ(trials.size(), rows.size());
  EXPECT_EQ(trials[7].run_dir, (dir_ / "runs" / trial_dir_name(trials[7].id)).string());
  trials[3].state = TrialState::running;
  s.update_trial(trials[3]);
  trials[4].state = TrialState::completed;
  s.update_trial(trials[4]);
  EXPECT_EQ(s.pending_trials(id, 4).at(3).id, trials[5].id);  // sweep order, pending only
  const std::vector<int64_t> cancelled = s.cancel_pending_trials(id, "stop it", 42.0);
  ASSERT_EQ(cancelled.size(), rows.size() - 2);
  const std::map<TrialState, int64_t> counts = s.trial_state_counts(id);
  EXPECT_EQ(counts.at(TrialState::cancelled), static_cast<int64_t>(rows.size()) - 2);
  EXPECT_EQ(counts.at(TrialState::running), 1);
  EXPECT_EQ(counts.at(TrialState::completed), 1);
  EXPECT_EQ(counts.count(TrialState::pending), 0u);
  EXPECT_EQ(s.trial_state_counts(other_id).at(TrialState::pending), 3);  // another experiment's are left alone
  EXPECT_EQ(s.trial_ids(id, TrialState::running), std::vector<int64_t>{trials[3].id});
  const TrialRow t = *s.trial(cancelled.back());
  EXPECT_EQ(t.state, TrialState::cancelled);
  EXPECT_EQ(t.reason, "stop it");
  EXPECT_EQ(t.ended_at, 42.0);
  std::vector<int64_t> with_events;
  for (const EventRow& ev : s.events_since(0, 0, id)) {
    EXPECT_EQ(ev.kind, "trial_cancelled");
    EXPECT_EQ(ev.message, "stop it");
    with_events.push_back(ev.trial_id);
  }
  EXPECT_EQ(with_events, cancelled);
  EXPECT_TRUE(s.cancel_pending_trials(id, "again", 43.0).empty());
}

#ifdef PRECON_BIN
TEST_F(StoreScale, RecipeCheckRefusesOversizedSweepsWithinAMemoryLimit) {
  // Refused from the recipe's numbers, before anything is expanded: the check's peak resident
  // memory stays under 512 MiB (expanding 2e6 trials took 3 GB), with the key, the line and both
  // numbers named. (Peak RSS, not an address-space limit: a CUDA build maps gigabytes of cuBLAS.)
  const fs::path random = dir_ / "random.toml", grid = dir_ / "grid.toml";
  std::ofstream(random) << "[sweep]\nmethod = \"random\"\nsamples = 2000000\n[sweep.parameters]\n"
                           "\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2] }\n";
  std::string text = "[sweep]\nmethod = \"grid\"\n[sweep.parameters]\n";
  for (const char* key : {"train.seed", "optimizer.lr", "optimizer.weight_decay", "optimizer.warmup_steps", "train.grad_clip"}) {
    text += "\"" + std::string(key) + "\" = [";
    for (int i = 0; i < 12; ++i) text += (i ? ", " : "") + std::to_string(i);
    text += "]\n";
  }
  std::ofstream(grid) << text;
  const auto check = [](const fs::path& recipe) {
    // The child's peak RSS (kB) on the last line, from getrusage after it exits.
    const std::string rusage = "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
                               "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
                               "sys.exit(rc)";
    test::CommandResult r = test::run_command(std::string(PRECON_PYTHON) + " -c \"" + rusage + "\" " +
                                              std::string(PRECON_BIN) + " recipe check '" + recipe.string() + "' 2>&1");
    const size_t at = r.output.rfind("peak_rss_kb ");
    EXPECT_NE(at, std::string::npos) << r.output;
    if (at != std::string::npos) {
      EXPECT_LT(std::stol(r.output.substr(at + 12)), 512 * 1024) << r.output;
    }
    return r;
  };
  const test::CommandResult r = check(random);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("random.toml:3: sweep.samples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("value 2000000 is out of range"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(kMaxSweepTrials)), std::string::npos) << r.output;
  const test::CommandResult g = check(grid);
  EXPECT_NE(g.status, 0) << g.output;
  EXPECT_NE(g.output.find("grid.toml:4"), std::string::npos) << g.output;
  EXPECT_NE(g.output.find("248832 trials, more than 100000"), std::string::npos) << g.output;
}
#endif

class Scale : public testing::ControllerFixture {
 protected:
  std::unique_ptr<Controller> start_controller() {
    ControllerOptions o = controller_options(1);
    o.slurm = "off";
    auto c = std::make_unique<Controller>(o);
    c->start();
    return c;
  }
  // Store writes of one operation so far (the controller's write histogram).
  static double writes(Controller& c, const std::string& op) {
    return parse_exposition(c.metrics().serialize())
        .value("precon_store_write_duration_seconds_count", {{"op", op}})
        .value_or(0);
  }
};

TEST_F(Scale, HundredThousandTrialsSubmitListRestartCancelAndStop) {
  const int64_t n = kMaxSweepTrials;
  const std::string text =
      recipe(5, "[sweep]\nmethod = \"random\"\nsamples = " + std::to_string(n) +
                    "\nmax_concurrent = 1\n[sweep.parameters]\n\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2] }\n");
  const auto guard = std::chrono::seconds(240);
  std::unique_ptr<Controller> c;
  int64_t id = 0;
  within("start and submit", guard, [&] {
    c = start_controller();
    // In-process: the HTTP client gives up after 10 s, and expanding 100,000 trials (the worker's
    // validation and TOML of each) takes longer on a loaded 2-core machine.
    id = c->submit_recipe(text, "scale.toml", {});
  });
  ASSERT_GT(id, 0);
  const std::string exp = "/api/v1/experiments/" + std::to_string(id);
  within("lists", guard, [&] {
    const json list = get(c->url(), "/api/v1/experiments");
    EXPECT_EQ(list["experiments"][0]["trials"], n);
    const json dash = get(c->url(), "/api/v1/dashboard/experiments");
    EXPECT_EQ(dash["experiments"][0]["trials"], n);
    EXPECT_NE(http_request(c->url(), "GET", "/metrics").body.find("precon_trials{"), std::string::npos);
  });
  within("stop", guard, [&] { c->stop(); });
  within("restart", guard, [&] { c = start_controller(); });
  // The pending trials end together in one write. Each trial that ends on its own meanwhile takes
  // two (its end, the next launch), and the one running at the cancel two more (launch, cancel).
  const auto ended = [&] {
    const json s = get(c->url(), "/api/v1/experiments")["experiments"][0]["trial_states"];
    return s.value("completed", int64_t{0}) + s.value("failed", int64_t{0});
  };
  const int64_t ended_before = ended();  // first, so a trial ending between the two reads is allowed for
  const double updates_before = writes(*c, "update_trial");
  within("cancel", guard, [&] {
    // One write ends 100,000 trials: under ThreadSanitizer, beside other tests, that took more
    // than the client's default 10 s once; the guard above bounds it.
    const ClientResponse r = http_request(c->url(), "POST", exp + "/cancel", "{}",
                                          {{"Content-Type", "application/json"}, {"Authorization", "Bearer admin-secret"}},
                                          std::chrono::seconds(120));
    EXPECT_EQ(r.status, 200) << r.body;
    // Through the list, which counts trials from an index (the experiment's own page lists all).
    EXPECT_TRUE(wait_for([&] { return get(c->url(), "/api/v1/experiments")["experiments"][0]["state"] != "running"; },
                         std::chrono::seconds(120)));
  });
  EXPECT_EQ(writes(*c, "cancel_pending_trials"), 1);
  EXPECT_LE(writes(*c, "update_trial") - updates_before, 2 + 2 * (ended() - ended_before));
  const json shown = get(c->url(), "/api/v1/experiments")["experiments"][0];
  const json states = shown["trial_states"];
  EXPECT_EQ(shown["state"], "cancelled");
  EXPECT_EQ(states["pending"], 0);
  EXPECT_EQ(states["running"], 0);
  // Tiny trials ran one at a time until the cancel; every other trial was cancelled.
  EXPECT_EQ(states["cancelled"].get<int64_t>() + states["completed"].get<int64_t>() + states["failed"].get<int64_t>(), n);
  EXPECT_GT(states["cancelled"].get<int64_t>(), n / 2);
  // Each cancelled trial ended exactly once, with its event.
  int64_t cancelled_events = 0;
  for (const EventRow& e : c->store().events_since(0, 0, id)) cancelled_events += e.kind == "trial_cancelled";
  EXPECT_EQ(cancelled_events, states["cancelled"].get<int64_t>());
  within("final stop", guard, [&] { c->stop(); });
}

// The dashboard's experiments list over a sweep at the cap, written straight into the store: one
// row per experiment whatever it holds, its best objective from one query of the store, and no
// query again until the experiment's data changes (the store counts its metric reads).
TEST_F(Scale, DashboardListReadsAnExperimentOnceUntilItChanges) {
  std::unique_ptr<Controller> c = start_controller();
  Store& store = c->store();
  ExperimentRow e;
  e.name = "big";
  e.state = ExperimentState::completed;
  e.run_root = (dir_ / "runs").string();
  std::vector<TrialRow> rows(static_cast<size_t>(kMaxSweepTrials));
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].index = static_cast<int64_t>(i);
    rows[i].state = TrialState::completed;
  }
  const int64_t id = store.create_experiment(e, rows);
  const std::vector<int64_t> ids = store.trial_ids(id, TrialState::completed);
  ASSERT_EQ(ids.size(), rows.size());
  // Every 50th trial reported val_loss (2,000 series); one of the others has the best point.
  for (size_t i = 0; i < ids.size(); i += 50)
    store.insert_metrics(ids[i], {{"val_loss", 10, 3.0, 1000}, {"val_loss", 20, 2.0 + 1e-6 * static_cast<double>(i), 1010}});
  store.insert_metrics(ids[70001], {{"val_loss", 30, 0.5, 1020}});

  const std::string list = "/api/v1/dashboard/experiments";
  const uint64_t before = store.metric_reads();
  const ClientResponse first = http_request(c->url(), "GET", list);
  ASSERT_EQ(first.status, 200) << first.body.substr(0, 300);
  EXPECT_LT(first.body.size(), 2048u);
  const json row = json::parse(first.body)["experiments"][0];
  EXPECT_EQ(row["trials"], kMaxSweepTrials);
  EXPECT_EQ(row["objective_best"].get<double>(), 0.5);
  EXPECT_EQ(row["objective_best_trial"], ids[70001]);
  EXPECT_EQ(store.metric_reads() - before, 1u);
  const uint64_t kept = store.metric_reads();
  EXPECT_EQ(get(c->url(), list)["experiments"][0]["objective_best"].get<double>(), 0.5);
  EXPECT_EQ(store.metric_reads(), kept);
  // A new point, then a trial row written: the store's writes end the kept value, read once more.
  store.insert_metrics(ids[3], {{"val_loss", 40, 0.25, 1030}});
  store.update_trial(*store.trial(ids[3]));
  const json again = get(c->url(), list)["experiments"][0];
  EXPECT_EQ(again["objective_best"].get<double>(), 0.25);
  EXPECT_EQ(again["objective_best_trial"], ids[3]);
  EXPECT_EQ(store.metric_reads() - kept, 1u);
  c->stop();
}

}  // namespace
}  // namespace precon::orch
