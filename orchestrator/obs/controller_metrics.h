// The controller's Prometheus metrics: one prometheus-cpp registry owned by the Controller, its
// families described in one table (controller_metrics.cpp), and the hooks that the scheduler,
// the store and the HTTP server call. Names follow docs/design.md, Prometheus names: `precon_`
// prefix, `_total` for counters, `_seconds` for durations, no colons.
// Training series (labels experiment, trial) come from worker reports and exist only while the
// trial has a running attempt: trial_active() admits a trial, trial_inactive() removes every
// series it had, and reports for a trial that is not active update nothing but the ingest count.
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orchestrator/store/store.h"

namespace prometheus {
class Registry;
}

namespace precon::orch {

class ControllerMetrics {
 public:
  // The exposition format served by serialize().
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  ControllerMetrics();
  ~ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  // Scheduler and executors. add_executor creates the executor's series at 0, so that rates
  // and alerts work before its first event.
  void add_executor(const std::string& executor);
  void attempt_started(const std::string& executor);
  void attempt_failed(const std::string& executor);    // failed, killed or lost without a stop request
  void attempt_requeued(const std::string& executor);  // asked to be requeued (not a failure)
  void executor_polled(const std::string& executor, double seconds, bool error);
  void early_stop_decision(bool stop);
  void set_queue_length(int64_t pending);

  // Store and HTTP server.
  void store_write(const char* op, double seconds);
  // route: the Route::name ("" when none matched: counted as "unmatched"); status: HTTP status.
  void http_request(const std::string& route, int status, double seconds);
  // Read when serving /metrics.
  void set_trial_counts(const std::map<TrialState, int64_t>& counts);
  void set_metric_cache_points(size_t points);
  // Seconds since store writes began to find the database locked by another process; 0 while they go through.
  void set_store_blocked_seconds(double seconds);

  // Training series. trial_active is idempotent and keeps series already there.
  void trial_active(int64_t trial_id, const std::string& experiment);
  void trial_inactive(int64_t trial_id);
  // One worker report (already stored): counts its points as ingested and, for an active trial,
  // sets each known metric to its value at the highest step reported so far (a resent or late
  // batch never moves a series back).
  void report(int64_t trial_id, const std::vector<MetricPoint>& points);
  size_t active_trials() const;

  // Failed attempts of a trial that is being retried (labels experiment, trial), kept between its
  // attempts so that "one trial failing repeatedly" can be told from many trials failing once;
  // removed by trial_ended().
  void trial_failed_attempts(int64_t trial_id, const std::string& experiment, int64_t failures);
  void trial_ended(int64_t trial_id);

  // Every family in the text exposition format 0.0.4.
  std::string serialize() const;
  prometheus::Registry& registry();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precon::orch
