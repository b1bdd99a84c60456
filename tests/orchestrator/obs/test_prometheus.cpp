// /metrics: the registry's bookkeeping (per-trial series exist only while a trial runs, a late
// batch never moves a series back), and the route over a real socket against a live controller
// running tiny sweeps, with values checked against the store; `promtool check metrics` on the body.
#include <cmath>
#include <set>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/service/controller.h"
#include "tests/orchestrator/support/controller_fixture.h"
#include "tests/orchestrator/support/prometheus_util.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

Exposition scrape(const ControllerMetrics& m) { return parse_exposition(m.serialize()); }

TEST(ControllerMetrics, TrialSeriesExistOnlyWhileTheTrialIsActive) {
  ControllerMetrics m;
  const std::vector<MetricPoint> points = {{"train_loss", 5, 2.5, 0},
                                           {"val_loss", 5, 2.75, 0},
                                           {"tokens_per_second", 5, 1000, 0},
                                           {"step_seconds", 5, 0.25, 0},
                                           {"optim_newton_schulz_seconds", 5, 0.125, 0},
                                           {"optim_inverse_root_seconds", 5, 0.0625, 0},
                                           {"inverse_root_failures", 5, 3, 0},
                                           {"grad_norm", 5, 1.5, 0},
                                           {"memory_peak_bytes", 5, 123456789, 0}};
  m.report(7, points);  // not active: counted, no series
  Exposition e = scrape(m);
  EXPECT_EQ(e.value("precon_metric_points_ingested_total"), 9.0);
  EXPECT_EQ(e.count_with_label("trial", "7"), 0u);

  m.trial_active(7, "sweep-a");
  m.trial_active(8, "sweep-a");
  EXPECT_EQ(m.active_trials(), 2u);
  m.report(7, points);
  e = scrape(m);
  const std::map<std::string, std::string> t7{{"experiment", "sweep-a"}, {"trial", "7"}};
  EXPECT_EQ(e.value("precon_metric_points_ingested_total"), 18.0);
  EXPECT_EQ(e.value("precon_trial_memory_peak_bytes", t7), 123456789.0);
  EXPECT_EQ(e.value("precon_trial_step", t7), 5.0);
  EXPECT_EQ(e.value("precon_trial_train_loss", t7), 2.5);
  EXPECT_EQ(e.value("precon_trial_val_loss", t7), 2.75);
  EXPECT_EQ(e.value("precon_trial_tokens_per_second", t7), 1000.0);
  EXPECT_EQ(e.value("precon_trial_step_seconds", t7), 0.25);
  EXPECT_EQ(e.value("precon_trial_optimizer_seconds", {{"trial", "7"}, {"phase", "newton_schulz"}}), 0.125);
  EXPECT_EQ(e.value("precon_trial_optimizer_seconds", {{"trial", "7"}, {"phase", "inverse_root"}}), 0.0625);
  EXPECT_FALSE(e.value("precon_trial_optimizer_seconds", {{"trial", "7"}, {"phase", "grafting"}}));  // not reported
  EXPECT_EQ(e.value("precon_trial_inverse_root_failures_total", t7), 3.0);
  EXPECT_EQ(e.count_with_label("trial", "8"), 0u);  // active, nothing reported yet: no made-up zeros
  EXPECT_EQ(e.types["precon_trial_inverse_root_failures_total"], "counter");
  EXPECT_EQ(e.types["precon_trial_train_loss"], "gauge");

  // A resent older batch does not move the series back; a newer one does; the counter follows
  // the worker's cumulative count.
  m.report(7, {{"train_loss", 4, 9.0, 0}, {"inverse_root_failures", 4, 1, 0}});
  e = scrape(m);
  EXPECT_EQ(e.value("precon_trial_train_loss", t7), 2.5);
  EXPECT_EQ(e.value("precon_trial_step", t7), 5.0);
  EXPECT_EQ(e.value("precon_trial_inverse_root_failures_total", t7), 3.0);
  m.report(7, {{"train_loss", 6, 2.0, 0}, {"inverse_root_failures", 6, 4, 0}});
  e = scrape(m);
  EXPECT_EQ(e.value("precon_trial_train_loss", t7), 2.0);
  EXPECT_EQ(e.value("precon_trial_step", t7), 6.0);
  EXPECT_EQ(e.value("precon_trial_val_loss", t7), 2.75);
  EXPECT_EQ(e.value("precon_trial_inverse_root_failures_total", t7), 4.0);

  // Ended: every series of the trial goes, and late reports do not bring them back.
  m.trial_inactive(7);
  m.report(7, points);
  e = scrape(m);
  EXPECT_EQ(e.count_with_label("trial", "7"), 0u);
  EXPECT_EQ(m.active_trials(), 1u);
  // Active again (a retry): series start afresh.
  m.trial_active(7, "sweep-a");
  m.report(7, {{"train_loss", 2, 3.5, 0}});
  e = scrape(m);
  EXPECT_EQ(e.value("precon_trial_train_loss", t7), 3.5);
  EXPECT_EQ(e.value("precon_trial_step", t7), 2.0);
}

TEST(ControllerMetrics, TokensSeenPerDatasetOfABlend) {
  ControllerMetrics m;
  m.trial_active(3, "blend");
  m.report(3, {{"tokens_seen", 6, 1000, 0}, {"tokens_seen.web", 6, 700, 0}, {"tokens_seen.code", 6, 300, 0}});
  m.report(3, {{"tokens_seen.web", 5, 1, 0}});  // an older batch: ignored
  Exposition e = scrape(m);
  EXPECT_EQ(e.value("precon_trial_tokens_seen", {{"trial", "3"}, {"dataset", "web"}}), 700.0);
  EXPECT_EQ(e.value("precon_trial_tokens_seen", {{"trial", "3"}, {"dataset", "code"}}), 300.0);
  EXPECT_EQ(e.count_with_label("dataset", "web") + e.count_with_label("dataset", "code"), 2u);
  EXPECT_EQ(e.types["precon_trial_tokens_seen"], "gauge");
  m.trial_inactive(3);
  e = scrape(m);
  EXPECT_EQ(e.count_with_label("trial", "3"), 0u);
}

TEST(ControllerMetrics, FailedAttemptsOfATrialLastBetweenAttemptsAndGoWhenItEnds) {
  ControllerMetrics m;
  const std::map<std::string, std::string> t4{{"experiment", "tiny"}, {"trial", "4"}};
  m.trial_failed_attempts(4, "tiny", 1);
  m.trial_active(4, "tiny");
  m.trial_inactive(4);  // an attempt ended: training series go, the failure count stays
  m.trial_failed_attempts(4, "tiny", 2);
  Exposition e = scrape(m);
  EXPECT_EQ(e.value("precon_trial_failed_attempts", t4), 2.0);
  m.trial_ended(4);
  m.trial_ended(4);  // idempotent
  EXPECT_EQ(scrape(m).count_with_label("trial", "4"), 0u);
}

TEST(ControllerMetrics, ControllerFamiliesCountWhatTheyAreTold) {
  ControllerMetrics m;
  m.add_executor("local");
  Exposition e = scrape(m);
  // Created at zero before any event, so that rates and alerts work from the start.
  for (const char* f : {"precon_attempts_started_total", "precon_attempts_failed_total", "precon_attempts_requeued_total",
                        "precon_executor_poll_errors_total"})
    EXPECT_EQ(e.value(f, {{"executor", "local"}}), 0.0) << f;
  EXPECT_EQ(e.value("precon_early_stop_decisions_total", {{"decision", "stop"}}), 0.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "pruned"}}), 0.0);

  m.attempt_started("local");
  m.attempt_started("local");
  m.attempt_failed("local");
  m.attempt_requeued("slurm");
  m.executor_polled("local", 0.002, false);
  m.executor_polled("local", 3.0, true);
  m.early_stop_decision(true);
  m.early_stop_decision(false);
  m.early_stop_decision(false);
  m.set_queue_length(4);
  m.store_write("insert_metrics", 0.0003);
  m.http_request("report", 200, 0.004);
  m.http_request("report", 200, 0.02);
  m.http_request("", 404, 0.001);
  m.set_trial_counts({{TrialState::running, 2}, {TrialState::completed, 5}});
  m.set_metric_cache_points(1234);
  e = scrape(m);
  EXPECT_EQ(e.value("precon_attempts_started_total", {{"executor", "local"}}), 2.0);
  EXPECT_EQ(e.value("precon_attempts_failed_total", {{"executor", "local"}}), 1.0);
  EXPECT_EQ(e.value("precon_attempts_requeued_total", {{"executor", "slurm"}}), 1.0);
  EXPECT_EQ(e.value("precon_executor_poll_errors_total", {{"executor", "local"}}), 1.0);
  EXPECT_EQ(e.value("precon_executor_poll_duration_seconds_count", {{"executor", "local"}}), 2.0);
  EXPECT_DOUBLE_EQ(*e.value("precon_executor_poll_duration_seconds_sum", {{"executor", "local"}}), 3.002);
  EXPECT_EQ(e.value("precon_executor_poll_duration_seconds_bucket", {{"executor", "local"}, {"le", "0.005"}}), 1.0);
  EXPECT_EQ(e.value("precon_executor_poll_duration_seconds_bucket", {{"executor", "local"}, {"le", "+Inf"}}), 2.0);
  EXPECT_EQ(e.value("precon_early_stop_decisions_total", {{"decision", "stop"}}), 1.0);
  EXPECT_EQ(e.value("precon_early_stop_decisions_total", {{"decision", "continue"}}), 2.0);
  EXPECT_EQ(e.value("precon_queue_length"), 4.0);
  EXPECT_EQ(e.value("precon_store_write_duration_seconds_count", {{"op", "insert_metrics"}}), 1.0);
  EXPECT_EQ(e.value("precon_http_request_duration_seconds_count", {{"route", "report"}, {"code", "200"}}), 2.0);
  EXPECT_EQ(e.value("precon_http_request_duration_seconds_bucket", {{"route", "report"}, {"code", "200"}, {"le", "0.01"}}),
            1.0);
  EXPECT_EQ(e.value("precon_http_request_duration_seconds_count", {{"route", "unmatched"}, {"code", "404"}}), 1.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "running"}}), 2.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "completed"}}), 5.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "pending"}}), 0.0);
  EXPECT_EQ(e.value("precon_metric_cache_points"), 1234.0);
  EXPECT_EQ(e.types["precon_http_request_duration_seconds"], "histogram");
  // docs/design.md, Prometheus names: precon_ prefix, counters end in _total, no colons.
  for (const auto& [name, type] : e.types) {
    EXPECT_EQ(name.rfind("precon_", 0), 0u) << name;
    EXPECT_EQ(name.find(':'), std::string::npos) << name;
    EXPECT_EQ(type == "counter", name.size() > 6 && name.substr(name.size() - 6) == "_total") << name;
  }
}

class Metrics : public ControllerFixture {
 protected:
  std::unique_ptr<orch::Controller> start() {
    auto c = std::make_unique<orch::Controller>(controller_options());
    c->start();
    return c;
  }
  // GET /metrics over the socket: checks status and content type, keeps the body for promtool.
  Exposition metrics(const std::string& url) {
    ClientResponse r = http_request(url, "GET", "/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    body_ = r.body;
    return parse_exposition(r.body);
  }
  // `promtool check metrics` (format and naming lint) on the last body.
  void expect_promtool_accepts_last_body() {
    const fs::path file = dir_ / "metrics.txt";
    std::ofstream(file) << body_;
    CommandResult r = run_command("promtool check metrics", file);
    EXPECT_EQ(r.status, 0) << "promtool check metrics (Debian package prometheus; deploy/install-deps.sh):\n"
                           << r.output << "\n--- body ---\n" << body_;
  }
  std::string body_;
};

TEST_F(Metrics, FinishedSweepCountsMatchTheStoreOverASocket) {
  auto c = start();
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(20, "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n\"optimizer.lr\" = [0.001, 0.003]\n"));
  ASSERT_GT(id, 0);
  ASSERT_TRUE(wait_for([&] { return c->scheduler().experiment_done(id); }, std::chrono::seconds(120)));
  // The scheduler's last tick sets the trial gauges and the queue length a poll interval after
  // the experiment ended: wait for it rather than a fixed time.
  Exposition e;
  wait_for([&] {
    e = metrics(url);
    return e.value("precon_trials", {{"state", "completed"}}) == 2.0 && e.value("precon_queue_length") == 0.0;
  }, std::chrono::seconds(10));
  EXPECT_EQ(e.value("precon_trials", {{"state", "completed"}}), 2.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "running"}}), 0.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "failed"}}), 0.0);
  EXPECT_EQ(e.value("precon_queue_length"), 0.0);
  EXPECT_EQ(e.value("precon_attempts_started_total", {{"executor", "local"}}), 2.0);
  EXPECT_EQ(e.value("precon_attempts_failed_total", {{"executor", "local"}}), 0.0);
  EXPECT_EQ(e.value("precon_attempts_requeued_total", {{"executor", "local"}}), 0.0);

  // Every point the store holds came through the report route and was counted once.
  int64_t stored = 0;
  std::set<int64_t> val_steps;
  for (const TrialRow& t : c->store().trials(id)) {
    stored += c->store().metric_count(t.id);
    for (const MetricPoint& p : c->store().metrics(t.id, "val_loss")) val_steps.insert(t.id * 1000 + p.step);
  }
  EXPECT_GT(stored, 2 * 20 * 10);
  EXPECT_EQ(e.value("precon_metric_points_ingested_total"), static_cast<double>(stored));

  // HTTP: the submit, the workers' reports and this scrape's predecessors, by route and code.
  EXPECT_EQ(e.value("precon_http_request_duration_seconds_count", {{"route", "experiments_submit"}, {"code", "201"}}), 1.0);
  const double reports = e.value("precon_http_request_duration_seconds_count", {{"route", "report"}, {"code", "200"}}).value_or(0);
  EXPECT_GE(reports, 2.0);
  EXPECT_EQ(e.value("precon_http_request_duration_seconds_bucket", {{"route", "report"}, {"code", "200"}, {"le", "+Inf"}}),
            reports);
  // SQLite: one experiment created, one insert per accepted report.
  EXPECT_EQ(e.value("precon_store_write_duration_seconds_count", {{"op", "create_experiment"}}), 1.0);
  // (A report is counted by HTTP once its answer is written, after its insert.)
  const double inserts = e.value("precon_store_write_duration_seconds_count", {{"op", "insert_metrics"}}).value_or(0);
  EXPECT_GE(inserts, reports);
  EXPECT_LE(inserts, reports + 1);
  EXPECT_GE(e.value("precon_store_write_duration_seconds_count", {{"op", "add_attempt"}}).value_or(0), 2.0);
  EXPECT_GT(e.value("precon_executor_poll_duration_seconds_count", {{"executor", "local"}}).value_or(0), 1.0);
  EXPECT_EQ(e.value("precon_executor_poll_errors_total", {{"executor", "local"}}), 0.0);
  // Early stopping (method none) judges each objective point of a running trial once, never stops.
  EXPECT_EQ(e.value("precon_early_stop_decisions_total", {{"decision", "stop"}}), 0.0);
  const double decisions = e.value("precon_early_stop_decisions_total", {{"decision", "continue"}}).value_or(-1);
  EXPECT_GE(decisions, 1.0);
  EXPECT_LE(decisions, static_cast<double>(val_steps.size()));
  // Finished trials have no series left.
  for (const Sample& s : e.samples) EXPECT_NE(s.name.rfind("precon_trial_", 0), 0u) << s.name;
  expect_promtool_accepts_last_body();
  c->stop();
}

TEST_F(Metrics, RunningTrialSeriesMatchTheStoreAndGoWhenItEnds) {
  auto c = start();
  const std::string url = c->url();
  // Shampoo, so that the worker also reports its inverse-root failure count.
  const int64_t id = submit(url, recipe(100000, "[sweep.parameters]\n\"optimizer.name\" = [\"shampoo\"]\n"));
  ASSERT_GT(id, 0);
  const std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 1u);
  const std::string trial = std::to_string(trials[0].id);
  const std::map<std::string, std::string> labels{{"experiment", "tiny"}, {"trial", trial}};

  Exposition e;
  ASSERT_TRUE(wait_for([&] {
    e = metrics(url);
    return e.value("precon_trial_step", labels).value_or(0) >= 7;
  }, std::chrono::seconds(60))) << body_;
  const int64_t step = static_cast<int64_t>(*e.value("precon_trial_step", labels));
  // train_loss is reported at every step, so the scrape holds its value at exactly that step.
  auto stored = c->store().metric_at_or_before(trials[0].id, "train_loss", step);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->step, step);
  EXPECT_NEAR(*e.value("precon_trial_train_loss", labels), stored->value, 1e-12 * std::abs(stored->value));
  bool val_stored = false;
  const double val = e.value("precon_trial_val_loss", labels).value_or(NAN);
  for (const MetricPoint& p : c->store().metrics(trials[0].id, "val_loss"))
    val_stored |= std::abs(p.value - val) <= 1e-12 * std::abs(p.value);
  EXPECT_TRUE(val_stored) << "val_loss " << val << " is not a stored value";
  EXPECT_GT(e.value("precon_trial_tokens_per_second", labels).value_or(0), 0.0);
  EXPECT_GT(e.value("precon_trial_step_seconds", labels).value_or(0), 0.0);
  for (const char* phase : {"newton_schulz", "statistics", "inverse_root", "grafting", "communication"})
    EXPECT_GE(e.value("precon_trial_optimizer_seconds", {{"trial", trial}, {"phase", phase}}).value_or(-1), 0.0) << phase;
  EXPECT_EQ(e.value("precon_trial_inverse_root_failures_total", labels), 0.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "running"}}), 1.0);
  expect_promtool_accepts_last_body();

  // Cancelled: the trial ends and each of its series goes with it.
  ClientResponse r = post(url, "/api/v1/trials/" + trial + "/cancel", "", "admin-secret");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(wait_for([&] { return c->store().trial(trials[0].id)->state == TrialState::cancelled; },
                       std::chrono::seconds(60)));
  e = metrics(url);
  EXPECT_EQ(e.count_with_label("trial", trial), 0u) << body_;
  EXPECT_EQ(e.value("precon_trials", {{"state", "cancelled"}}), 1.0);
  EXPECT_EQ(e.value("precon_trials", {{"state", "running"}}), 0.0);
  EXPECT_EQ(e.value("precon_attempts_failed_total", {{"executor", "local"}}), 0.0);  // a stop is no failure
  EXPECT_EQ(c->metrics().active_trials(), 0u);
  c->stop();
}

}  // namespace
}  // namespace precon::orch::testing
