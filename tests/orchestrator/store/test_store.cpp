// Store: row round trips, transactions, metric ingest and downsampling (against a naive
// reference), events, concurrent readers, persistence (migrations: test_store_migrations.cpp).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "orchestrator/store/series_cache.h"
#include "tests/orchestrator/support/downsample_reference.h"
#include "orchestrator/store/store.h"
#include "orchestrator/store/token_hash.h"
#include "tests/orchestrator/support/store_fixture.h"
#include "tests/common/test_util.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;
using testing::reference_downsample;
using test::kNaN;

using testing::full_experiment;
using testing::full_trial;
using testing::one_trial;
using testing::raw_sql;
using testing::StoreTest;

class StoreRows : public StoreTest {};
class StoreTransactions : public StoreTest {};
class StoreMetrics : public StoreTest {};
class StoreEvents : public StoreTest {};
class StoreConcurrency : public StoreTest {};
class StorePersistence : public StoreTest {};

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

void expect_same_points(const std::vector<MetricPoint>& a, const std::vector<MetricPoint>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << i;
    EXPECT_EQ(a[i].step, b[i].step) << i;
    EXPECT_TRUE(same_value(a[i].value, b[i].value)) << i << ": " << a[i].value << " vs " << b[i].value;
    EXPECT_EQ(a[i].time, b[i].time) << i;
  }
}

TEST_F(StoreRows, ExperimentRoundTrip) {
  Store s(path_);
  const int64_t a = s.create_experiment(full_experiment("q"), {});
  const int64_t b = s.create_experiment(full_experiment("q"), {});
  const int64_t c = s.create_experiment(full_experiment("other"), {});
  auto e = s.experiment(a);
  ASSERT_TRUE(e);
  const ExperimentRow want = full_experiment("q");
  EXPECT_EQ(e->id, a);
  EXPECT_EQ(e->name, want.name);
  EXPECT_EQ(e->description, want.description);
  EXPECT_EQ(e->recipe_path, want.recipe_path);
  EXPECT_EQ(e->recipe_text, want.recipe_text);
  EXPECT_EQ(e->overrides_json, want.overrides_json);
  EXPECT_EQ(e->state, ExperimentState::running);
  EXPECT_EQ(e->objective_metric, want.objective_metric);
  EXPECT_EQ(e->objective_mode, "max");
  EXPECT_EQ(e->max_concurrent, 3);
  EXPECT_EQ(e->max_attempts, 2);
  EXPECT_EQ(e->early_stop_json, want.early_stop_json);
  EXPECT_EQ(e->run_root, want.run_root);
  EXPECT_EQ(e->created_at, want.created_at);
  EXPECT_EQ(e->ended_at, 0);
  EXPECT_EQ(s.experiment_by_name("q")->id, b);  // the newest of that name
  EXPECT_FALSE(s.experiment_by_name("nope"));
  EXPECT_FALSE(s.experiment(999));
  auto all = s.experiments();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, c);
  EXPECT_EQ(all[2].id, a);
  s.set_experiment_state(a, ExperimentState::cancelled, 42.5);
  EXPECT_EQ(s.experiment(a)->state, ExperimentState::cancelled);
  EXPECT_EQ(s.experiment(a)->ended_at, 42.5);
  EXPECT_THROW(s.set_experiment_state(999, ExperimentState::completed, 1), StoreError);
}

TEST_F(StoreRows, TrialRoundTrip) {
  Store s(path_);
  TrialRow t2 = full_trial(2);
  t2.state = TrialState::running;
  const int64_t e = s.create_experiment(full_experiment("q"), {t2, full_trial(0), full_trial(1)});
  auto trials = s.trials(e);
  ASSERT_EQ(trials.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(trials[i].index, i);  // by index, not insertion
  const TrialRow& t = trials[2];
  EXPECT_EQ(t.experiment_id, e);
  EXPECT_EQ(t.params_json, t2.params_json);
  EXPECT_EQ(t.config_toml, t2.config_toml);
  EXPECT_EQ(t.state, TrialState::running);
  EXPECT_EQ(t.reason, "r2");
  EXPECT_EQ(t.run_dir, "/runs/q/2");
  EXPECT_EQ(t.token_hash, "tok2");
  EXPECT_EQ(t.attempts, 2);
  EXPECT_EQ(t.last_step, 7);
  EXPECT_EQ(t.created_at, 1.5);
  EXPECT_EQ(t.started_at, 2.5);
  EXPECT_EQ(t.ended_at, 0);
  EXPECT_EQ(s.trial(t.id)->token_hash, "tok2");
  s.set_trial_token_hash(t.id, "h2");
  EXPECT_EQ(s.trial(t.id)->token_hash, "h2");
  EXPECT_THROW(s.set_trial_token_hash(999, "h"), StoreError);
  EXPECT_EQ(s.trials_in_state(TrialState::running).size(), 1u);
  EXPECT_EQ(s.trials_in_state(TrialState::pending).size(), 2u);

  TrialRow u = trials[0];
  u.state = TrialState::pruned;
  u.reason = "asha rung 1";
  u.attempts = 4;
  u.last_step = 90;
  u.started_at = 10;
  u.ended_at = 20;
  u.run_dir = "/elsewhere";
  s.update_trial(u);
  auto back = s.trial(u.id);
  EXPECT_EQ(back->state, TrialState::pruned);
  EXPECT_EQ(back->reason, "asha rung 1");
  EXPECT_EQ(back->attempts, 4);
  EXPECT_EQ(back->last_step, 90);
  EXPECT_EQ(back->started_at, 10);
  EXPECT_EQ(back->ended_at, 20);
  EXPECT_EQ(back->run_dir, "/elsewhere");
  EXPECT_TRUE(is_terminal(back->state));
  EXPECT_EQ(parse_trial_state("pruned"), TrialState::pruned);
  EXPECT_FALSE(parse_trial_state("bogus"));
  u.id = 999;
  EXPECT_THROW(s.update_trial(u), StoreError);
}

TEST_F(StoreRows, TrialsWithoutARunDirAreNamedAfterTheirId) {
  Store s(path_);
  s.create_experiment(full_experiment("first"), {full_trial(0), full_trial(1), full_trial(2)});
  std::vector<TrialRow> unnamed{full_trial(0), full_trial(1), full_trial(2)};
  for (TrialRow& t : unnamed) t.run_dir.clear();
  const int64_t e = s.create_experiment(full_experiment("second"), unnamed);
  std::vector<int64_t> ids;
  for (const TrialRow& t : s.trials(e)) {
    ids.push_back(t.id);
    EXPECT_EQ(t.run_dir, "/runs/q/trial-" + std::to_string(t.id));  // not trial-<index>
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(trial_dir_name(5), "trial-5");
}

TEST_F(StoreRows, AttemptRoundTrip) {
  Store s(path_);
  const int64_t trial = one_trial(s);
  AttemptRow a{0, trial, 1, "slurm", "12345", "node[1-2]", AttemptState::open, -1, "", 100, 0};
  const int64_t id1 = s.add_attempt(a);
  a.number = 2;
  a.external_id = "12346";
  const int64_t id2 = s.add_attempt(a);
  EXPECT_EQ(s.open_attempts().size(), 2u);
  AttemptRow done = s.attempts(trial).at(0);
  EXPECT_EQ(done.id, id1);
  EXPECT_EQ(done.executor, "slurm");
  EXPECT_EQ(done.external_id, "12345");
  EXPECT_EQ(done.nodes, "node[1-2]");
  EXPECT_EQ(done.state, AttemptState::open);
  EXPECT_EQ(done.exit_code, -1);
  EXPECT_EQ(done.started_at, 100);
  done.state = AttemptState::requeue;
  done.exit_code = 75;
  done.detail = "SIGUSR1";
  done.ended_at = 200;
  s.update_attempt(done);
  auto open = s.open_attempts();
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].id, id2);
  auto back = s.attempts(trial).at(0);
  EXPECT_EQ(back.state, AttemptState::requeue);
  EXPECT_EQ(back.exit_code, 75);
  EXPECT_EQ(back.detail, "SIGUSR1");
  EXPECT_EQ(back.ended_at, 200);
  EXPECT_STREQ(attempt_state_name(back.state), "requeue");
  EXPECT_THROW(s.add_attempt(a), StoreError);  // (trial, number) is unique
}

TEST_F(StoreRows, CheckpointsIdempotent) {
  Store s(path_);
  const int64_t trial = one_trial(s);
  const int64_t c200 = s.add_checkpoint({0, trial, 200, "/ck/200", 3.5, 10, 0});
  const int64_t c100 = s.add_checkpoint({0, trial, 100, "/ck/100", kNaN, 5, 0});
  EXPECT_EQ(s.add_checkpoint({0, trial, 200, "/ck/200", 3.5, 10, 0}), c200);
  auto ck = s.checkpoints(trial);
  ASSERT_EQ(ck.size(), 2u);
  EXPECT_EQ(ck[0].id, c100);
  EXPECT_TRUE(std::isnan(ck[0].objective));
  EXPECT_EQ(ck[1].path, "/ck/200");
  EXPECT_EQ(ck[1].objective, 3.5);
  EXPECT_EQ(ck[1].created_at, 10);
  s.mark_checkpoint_deleted(c100, 77);
  EXPECT_EQ(s.checkpoints(trial)[0].deleted_at, 77);
  EXPECT_THROW(s.mark_checkpoint_deleted(999, 1), StoreError);
  EXPECT_THROW(s.add_checkpoint({0, 999, 1, "/x", 0, 0, 0}), StoreError);  // unknown trial
}

TEST_F(StoreTransactions, ExperimentAndTrialsAtomic) {
  Store s(path_);
  // The third trial repeats an index: the insert fails after the experiment and two trials.
  EXPECT_THROW(s.create_experiment(full_experiment("q"), {full_trial(0), full_trial(1), full_trial(1)}),
               StoreError);
  EXPECT_TRUE(s.experiments().empty());
  EXPECT_TRUE(s.trials_in_state(TrialState::pending).empty());
  const int64_t trial = one_trial(s);
  EXPECT_THROW(s.insert_metrics(999, {{"loss", 1, 1, 1}}), StoreError);
  EXPECT_THROW(s.insert_metrics(trial, {{"loss", 1, 1, 1}, {"", 2, 1, 1}}), StoreError);
  EXPECT_EQ(s.metric_count(trial), 0);
  EXPECT_TRUE(s.metric_names(trial).empty());
  EXPECT_EQ(s.trial(trial)->last_step, 7);
}

TEST_F(StoreMetrics, IdempotentAndLastStep) {
  Store s(path_);
  const int64_t trial = one_trial(s);
  std::vector<MetricPoint> batch;
  for (int64_t step = 1; step <= 50; ++step) batch.push_back({"loss", step, 10.0 / step, 100.0 + step});
  EXPECT_EQ(s.insert_metrics(trial, batch), 50u);
  EXPECT_EQ(s.trial(trial)->last_step, 50);
  EXPECT_EQ(s.metrics(trial, "loss").size(), 50u);  // loads the cached series
  for (auto& p : batch) p.value += 1;
  s.insert_metrics(trial, batch);  // a resend replaces
  s.insert_metrics(trial, {{"loss", 3, 0.5, 1}, {"lr", 3, 0.01, 1}});
  EXPECT_EQ(s.metric_count(trial), 51);
  EXPECT_EQ(s.trial(trial)->last_step, 50);  // never lowered
  auto loss = s.metrics(trial, "loss");
  ASSERT_EQ(loss.size(), 50u);
  EXPECT_EQ(loss[2].value, 0.5);
  EXPECT_EQ(loss[9].value, 2.0);
  EXPECT_EQ(s.last_metric(trial, "loss")->step, 50);
  EXPECT_EQ(s.metric_at_or_before(trial, "lr", 100)->value, 0.01);
  EXPECT_FALSE(s.metric_at_or_before(trial, "lr", 2));
  EXPECT_FALSE(s.last_metric(trial, "nope"));
  EXPECT_EQ(s.metric_names(trial), (std::vector<std::string>{"loss", "lr"}));
  s.insert_metrics(trial, {{"loss", 60, 1, 1}});
  EXPECT_EQ(s.trial(trial)->last_step, 60);
}

TEST_F(StoreMetrics, NaNRoundTrip) {
  {
    Store s(path_);
    const int64_t trial = one_trial(s);
    s.insert_metrics(trial, {{"loss", 1, 2.0, 1}, {"loss", 2, kNaN, 2}, {"loss", 3, 1.0, 3}});
    EXPECT_TRUE(std::isnan(s.metrics(trial, "loss")[1].value));
    EXPECT_TRUE(std::isnan(s.metric_at_or_before(trial, "loss", 2)->value));
  }
  Store s(path_);  // from SQLite, not the cache
  const int64_t trial = s.trials_in_state(TrialState::pending).at(0).id;
  auto loss = s.metrics(trial, "loss", 2);
  EXPECT_EQ(loss.size(), 2u);  // NaN is not an extreme: min and max survive
  EXPECT_EQ(loss[0].value, 2.0);
  EXPECT_EQ(loss[1].value, 1.0);
  EXPECT_TRUE(std::isnan(s.metrics(trial, "loss")[1].value));
}

TEST_F(StoreMetrics, NewSeriesAreCachedFromTheirFirstPointOldOnesAreLoaded) {
  int64_t trial = 0;
  {
    Store s(path_);
    trial = one_trial(s);
    std::vector<MetricPoint> first;
    for (int64_t i = 1; i <= 100; ++i) first.push_back({"loss", i, 1.0 / i, 0.0});
    s.insert_metrics(trial, first);
  }
  // A new controller on the same file: the series has rows, so it must not start empty.
  Store s(path_);
  s.insert_metrics(trial, {{"loss", 101, 0.5, 0.0}, {"acc", 101, 0.25, 0.0}});
  EXPECT_EQ(s.metrics(trial, "loss").size(), 101u);
  // "acc" started with this write: it is served from the cache without reading SQLite, which
  // shows as rows deleted behind the store's back still being returned.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DELETE FROM metrics WHERE name_id = (SELECT id FROM metric_names WHERE name = 'acc')",
                           nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto acc = s.metrics(trial, "acc");
  ASSERT_EQ(acc.size(), 1u);
  EXPECT_EQ(acc[0].value, 0.25);
}

TEST_F(StoreMetrics, WarmSeriesLoadsEveryNameOfTheTrial) {
  int64_t trial = 0;
  {
    Store s(path_);
    trial = one_trial(s);
    s.insert_metrics(trial, {{"loss", 1, 2.0, 0.0}, {"loss", 2, 1.5, 0.0}, {"lr", 1, 0.1, 0.0}});
  }
  Store s(path_);
  std::atomic<bool> cancel{true};
  s.warm_series(trial, &cancel);  // cancelled before the first series: loads nothing
  s.warm_series(trial);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DELETE FROM metrics", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ(s.metrics(trial, "loss").size(), 2u);  // served from the cache the warm-up filled
  EXPECT_EQ(s.metrics(trial, "lr").size(), 1u);
}

TEST_F(StoreMetrics, DownsampleMatchesReference) {
  Store s(path_);
  const int64_t trial = one_trial(s);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 1);
  const size_t n = 10007;
  std::vector<double> values(n);
  std::vector<MetricPoint> points;
  for (size_t i = 0; i < n; ++i) {
    values[i] = std::round(4 * noise(rng)) / 4;  // ties, to check the first of equal extremes
    if (i % 997 == 5) values[i] = kNaN;
    if (i == 4321) values[i] = 1e6;   // a spike
    if (i == 777) values[i] = -1e6;
    points.push_back({"loss", static_cast<int64_t>(3 * i + 10), values[i], static_cast<double>(i)});
  }
  for (size_t off = 0; off < n; off += 500)
    s.insert_metrics(trial, {points.begin() + off, points.begin() + std::min(n, off + 500)});
  for (size_t m : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5}, size_t{7}, size_t{100},
                   size_t{2000}, size_t{4999}, n - 1, n, n + 1}) {
    SCOPED_TRACE(m);
    auto got = s.metrics(trial, "loss", m);
    std::vector<MetricPoint> want;
    for (size_t i : reference_downsample(values, m)) want.push_back(points[i]);
    expect_same_points(got, want);
    if (m > 0) {
      EXPECT_LE(got.size(), m);
    }
    if (m >= 2) {
      auto has = [&](double v) {
        return std::any_of(got.begin(), got.end(), [&](const MetricPoint& p) { return p.value == v; });
      };
      EXPECT_TRUE(has(1e6));
      EXPECT_TRUE(has(-1e6));
    }
    if (m >= 4) {
      EXPECT_EQ(got.front().step, points.front().step);
      EXPECT_EQ(got.back().step, points.back().step);
    }
  }
}

TEST_F(StoreMetrics, CacheStaysCurrent) {
  std::vector<MetricPoint> cached;
  {
    Store s(path_);
    const int64_t trial = one_trial(s);
    std::vector<MetricPoint> batch;
    for (int64_t step = 0; step < 1000; step += 2) batch.push_back({"loss", step, double(step), 0});
    s.insert_metrics(trial, batch);
    // A monotonic series: each bucket's first and last are its extremes, two points a bucket.
    EXPECT_EQ(s.metrics(trial, "loss", 100).size(), 50u);
    // Overwrites, appends, and steps between cached ones (a resumed trial re-reporting).
    s.insert_metrics(trial, {{"loss", 10, -5, 1}, {"loss", 2000, 7, 1}, {"loss", 11, 3, 1}, {"loss", -1, 4, 1},
                             {"loss", 11, 9, 2}});
    cached = s.metrics(trial, "loss");
    EXPECT_EQ(cached.size(), 503u);
    EXPECT_GT(s.metric_cache_points(), 0u);
  }
  Store s(path_);
  const int64_t trial = s.trials_in_state(TrialState::pending).at(0).id;
  expect_same_points(cached, s.metrics(trial, "loss"));
  EXPECT_EQ(cached[0].step, -1);
  EXPECT_EQ(cached[7].value, 9);  // step 11: the later of the two in one batch
}

TEST_F(StoreMetrics, CacheLimitEvicts) {
  Store s(path_);
  const int64_t trial = one_trial(s);
  s.set_metric_cache_limit(1000);
  for (const char* name : {"a", "b", "c"}) {
    std::vector<MetricPoint> batch;
    for (int64_t step = 0; step < 600; ++step) batch.push_back({name, step, double(step), 0});
    s.insert_metrics(trial, batch);
    EXPECT_EQ(s.metrics(trial, name).size(), 600u);
    EXPECT_LE(s.metric_cache_points(), 1000u);
  }
  s.insert_metrics(trial, {{"a", 5, -1, 0}, {"c", 5, -1, 0}});  // "a" was evicted, "c" is cached
  EXPECT_EQ(s.metrics(trial, "a")[5].value, -1);
  EXPECT_EQ(s.metrics(trial, "c")[5].value, -1);
  EXPECT_EQ(s.metrics(trial, "b")[5].value, 5);
}

TEST_F(StoreEvents, CursorAndFilter) {
  Store s(path_);
  std::vector<int64_t> ids;
  for (int i = 0; i < 7; ++i)
    ids.push_back(s.add_event({0, double(i), i % 3, i, "kind" + std::to_string(i), "m", i == 0 ? "" : R"({"a":1})"}));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  auto all = s.events_since(0, 0);
  ASSERT_EQ(all.size(), 7u);
  EXPECT_EQ(all[0].data_json, "{}");
  EXPECT_EQ(all[3].kind, "kind3");
  EXPECT_EQ(all[3].experiment_id, 0);
  EXPECT_EQ(all[4].trial_id, 4);
  EXPECT_EQ(all[4].time, 4.0);
  EXPECT_EQ(all[4].data_json, R"({"a":1})");
  std::vector<int64_t> paged;
  for (int64_t cursor = 0;;) {
    auto page = s.events_since(cursor, 3);
    if (page.empty()) break;
    EXPECT_LE(page.size(), 3u);
    for (const auto& e : page) paged.push_back(e.id);
    cursor = page.back().id;
  }
  EXPECT_EQ(paged, ids);
  auto exp1 = s.events_since(0, 10, 1);
  ASSERT_EQ(exp1.size(), 2u);
  EXPECT_EQ(exp1[0].id, ids[1]);
  EXPECT_EQ(exp1[1].id, ids[4]);
  EXPECT_EQ(s.events_since(ids[1], 10, 1).size(), 1u);
  EXPECT_TRUE(s.events_since(ids.back(), 10).empty());
}

TEST_F(StoreConcurrency, ReadersBesideWriter) {
  Store s(path_);
  const int64_t trial = one_trial(s);
  constexpr int64_t kBatches = 150, kBatch = 40;
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, reads{0};
  auto reader = [&](int id) {
    size_t seen = 0;
    while (!done) {
      try {
        auto pts = s.metrics(trial, "loss", id % 2 ? 0 : 64);
        if (id % 2) {  // the full series: a prefix of what the writer sends, in order
          if (pts.size() < seen) ++failures;
          seen = pts.size();
          for (size_t i = 0; i < pts.size(); ++i)
            if (pts[i].step != int64_t(i) || pts[i].value != 0.5 * double(i)) ++failures;
        } else if (pts.size() > 64) {
          ++failures;
        }
        s.trial(trial);
        s.events_since(0, 10);
        ++reads;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(reader, i);
  for (int64_t b = 0; b < kBatches; ++b) {
    std::vector<MetricPoint> batch;
    for (int64_t i = b * kBatch; i < (b + 1) * kBatch; ++i) batch.push_back({"loss", i, 0.5 * double(i), 0});
    s.insert_metrics(trial, batch);
    if (b % 10 == 0) s.add_event({0, 0, 0, trial, "progress", "", "{}"});
  }
  done = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(s.metrics(trial, "loss").size(), size_t(kBatches * kBatch));
  EXPECT_EQ(s.metric_count(trial), kBatches * kBatch);
}

TEST_F(StorePersistence, ReopenKeepsEverything) {
  int64_t exp = 0, trial = 0;
  {
    Store s(path_);
    EXPECT_EQ(s.path(), path_);
    exp = s.create_experiment(full_experiment("q"), {full_trial(0), full_trial(1)});
    trial = s.trials(exp)[1].id;
    s.add_attempt({0, trial, 1, "local", "4242", "", AttemptState::open, -1, "", 1, 0});
    s.insert_metrics(trial, {{"loss", 1, 2, 3}, {"loss", 2, 1, 4}});
    s.add_checkpoint({0, trial, 2, "/ck/2", 1, 4, 0});
    s.add_event({0, 5, exp, trial, "trial_started", "hi", "{}"});
    EXPECT_TRUE(fs::exists(path_.string() + "-wal"));  // WAL mode
  }
  Store s(path_);
  EXPECT_EQ(s.experiment(exp)->name, "q");
  EXPECT_EQ(s.trials(exp).size(), 2u);
  EXPECT_EQ(s.trial(trial)->last_step, 7);
  EXPECT_EQ(s.attempts(trial).at(0).external_id, "4242");
  EXPECT_EQ(s.open_attempts().size(), 1u);
  EXPECT_EQ(s.metrics(trial, "loss").size(), 2u);
  EXPECT_EQ(s.checkpoints(trial).at(0).path, "/ck/2");
  EXPECT_EQ(s.events_since(0, 0).at(0).message, "hi");
}

}  // namespace
}  // namespace precon::orch
