// The families of /metrics, described in two tables (controller-wide and per trial), and the
// bookkeeping that keeps per-trial series to active trials.
#include "orchestrator/obs/controller_metrics.h"

#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace precon::orch {

namespace {

namespace pm = prometheus;

// Buckets: HTTP answers and SQLite writes take from tens of microseconds to a second; an
// executor poll of Slurm (squeue/sacct) can take seconds.
const pm::Histogram::BucketBoundaries kFastBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                      0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
const pm::Histogram::BucketBoundaries kPollBuckets = {0.0001, 0.001, 0.005, 0.01, 0.05, 0.1,
                                                      0.25,   0.5,   1,     2.5,  5,    10};

// Per-trial series: the worker metric each one follows.
enum TrialFamily {
  kTrainLoss, kValLoss, kTokensPerSecond, kStepSeconds, kOptimizerSeconds, kMemoryPeakBytes, kInverseRootFailures
};
constexpr size_t kTrialGaugeFamilies = kInverseRootFailures;  // the families before it are gauges
struct TrialSeriesSpec {
  const char* worker_metric;  // name in the worker's report (worker/train/trainer.cpp)
  TrialFamily family;
  const char* phase;          // label phase for kOptimizerSeconds, else nullptr
};
constexpr std::array<TrialSeriesSpec, 12> kTrialSeries = {{
    {"train_loss", kTrainLoss, nullptr},
    {"val_loss", kValLoss, nullptr},
    {"tokens_per_second", kTokensPerSecond, nullptr},
    {"step_seconds", kStepSeconds, nullptr},
    {"optim_newton_schulz_seconds", kOptimizerSeconds, "newton_schulz"},
    {"optim_statistics_seconds", kOptimizerSeconds, "statistics"},
    {"optim_inverse_root_seconds", kOptimizerSeconds, "inverse_root"},
    {"optim_grafting_seconds", kOptimizerSeconds, "grafting"},
    {"optim_communication_seconds", kOptimizerSeconds, "communication"},  // the owners' all-gathers
    {"optim_eigenbasis_seconds", kOptimizerSeconds, "eigenbasis"},        // SOAP's bases
    {"memory_peak_bytes", kMemoryPeakBytes, nullptr},  // the largest over the trial's ranks
    {"inverse_root_failures", kInverseRootFailures, nullptr},  // cumulative count from Shampoo
}};

// The worker's per-dataset token counts (worker/train/trainer.cpp): tokens_seen.<dataset>.
constexpr const char* kTokensSeenPrefix = "tokens_seen.";

}  // namespace

struct ControllerMetrics::Impl {
  // The series of one active trial; created on its first report of each metric.
  struct Trial {
    std::string experiment;
    int64_t step = std::numeric_limits<int64_t>::min();
    pm::Gauge* step_gauge = nullptr;
    std::array<int64_t, kTrialSeries.size()> last_step;
    std::array<pm::Gauge*, kTrialSeries.size()> gauges{};
    pm::Counter* failures = nullptr;
    std::map<std::string, std::pair<int64_t, pm::Gauge*>> tokens_seen;  // dataset -> (step, gauge)
    pm::Labels labels(int64_t id) const { return {{"experiment", experiment}, {"trial", std::to_string(id)}}; }
  };

  std::shared_ptr<pm::Registry> registry = std::make_shared<pm::Registry>();

  // Controller-wide.
  pm::Family<pm::Gauge>& trials = family(pm::BuildGauge(), "precon_trials",
                                         "Trials by state, over every experiment in the store.");
  pm::Family<pm::Gauge>& queue = family(pm::BuildGauge(), "precon_queue_length",
                                        "Pending trials of running experiments waiting for a launch.");
  pm::Family<pm::Counter>& started = family(pm::BuildCounter(), "precon_attempts_started_total",
                                            "Worker attempts launched, by executor.");
  pm::Family<pm::Counter>& failed = family(
      pm::BuildCounter(), "precon_attempts_failed_total",
      "Worker attempts that failed (nonzero exit, killed or lost without a stop request), by executor.");
  pm::Family<pm::Counter>& requeued = family(
      pm::BuildCounter(), "precon_attempts_requeued_total",
      "Worker attempts that checkpointed and asked to be requeued (preemption, time limit), by executor.");
  pm::Family<pm::Histogram>& http = family(pm::BuildHistogram(), "precon_http_request_duration_seconds",
                                           "Time to answer an HTTP request, by route name and status code.");
  pm::Family<pm::Counter>& ingested = family(pm::BuildCounter(), "precon_metric_points_ingested_total",
                                             "Metric points received in worker reports and stored.");
  pm::Family<pm::Histogram>& store_writes = family(
      pm::BuildHistogram(), "precon_store_write_duration_seconds",
      "Time a SQLite write held the store's writer, by operation.");
  pm::Family<pm::Gauge>& cache_points = family(pm::BuildGauge(), "precon_metric_cache_points",
                                               "Metric points held in the store's in-memory series cache.");
  pm::Family<pm::Gauge>& store_blocked = family(
      pm::BuildGauge(), "precon_store_blocked_seconds",
      "Seconds since writes to the store began to find the database locked by another process (a write "
      "transaction held outside the controller; reports are answered 503 meanwhile); 0 while writes go through.");
  pm::Family<pm::Histogram>& polls = family(pm::BuildHistogram(), "precon_executor_poll_duration_seconds",
                                            "Time to poll an executor for attempts that ended, by executor.");
  pm::Family<pm::Counter>& poll_errors = family(pm::BuildCounter(), "precon_executor_poll_errors_total",
                                                "Executor polls that failed, by executor.");
  pm::Family<pm::Counter>& early_stop = family(
      pm::BuildCounter(), "precon_early_stop_decisions_total",
      "Early-stopping decisions on reported objective values, by decision (stop or continue).");

  // Training, per active trial (labels experiment, trial).
  std::array<pm::Family<pm::Gauge>*, kTrialGaugeFamilies> trial_gauges = {
      &family(pm::BuildGauge(), "precon_trial_train_loss", "Training loss at the latest reported step."),
      &family(pm::BuildGauge(), "precon_trial_val_loss", "Validation loss at the latest evaluation."),
      &family(pm::BuildGauge(), "precon_trial_tokens_per_second", "Training throughput at the latest reported step."),
      &family(pm::BuildGauge(), "precon_trial_step_seconds", "Wall-clock seconds of the latest reported step."),
      &family(pm::BuildGauge(), "precon_trial_optimizer_seconds",
              "Optimizer seconds per phase (newton_schulz, statistics, inverse_root, grafting, eigenbasis, "
              "communication; the slowest rank's) since the previous report."),
      &family(pm::BuildGauge(), "precon_trial_memory_peak_bytes",
              "Peak resident memory of the trial's largest rank so far (VmHWM), at the latest reported step."),
  };
  pm::Family<pm::Gauge>& trial_tokens = family(
      pm::BuildGauge(), "precon_trial_tokens_seen",
      "Training tokens drawn from each dataset (of a blend) so far, by dataset.");
  pm::Family<pm::Gauge>& trial_step = family(pm::BuildGauge(), "precon_trial_step",
                                             "Latest optimizer step reported by the trial's worker.");
  pm::Family<pm::Counter>& trial_failures = family(
      pm::BuildCounter(), "precon_trial_inverse_root_failures_total",
      "Shampoo inverse-root computations that failed and kept the previous root, over the trial's run.");

  pm::Family<pm::Gauge>& trial_failed = family(
      pm::BuildGauge(), "precon_trial_failed_attempts",
      "Failed attempts of a trial that is still being retried (removed when the trial ends).");

  mutable std::mutex mu;  // guards active, and makes creating/removing a trial's series atomic for a scrape
  std::unordered_map<int64_t, Trial> active;
  std::unordered_map<int64_t, pm::Gauge*> failing;  // trial -> its precon_trial_failed_attempts

  template <class T>
  pm::Family<T>& family(pm::detail::Builder<T> builder, const char* name, const char* help) {
    return builder.Name(name).Help(help).Register(*registry);
  }

  void set(Trial& t, int64_t id, size_t index, double value) {
    const TrialSeriesSpec& spec = kTrialSeries[index];
    if (spec.family == kInverseRootFailures) {
      if (!t.failures) t.failures = &trial_failures.Add(t.labels(id));
      // The worker reports a cumulative count; the counter follows it upwards.
      if (value > t.failures->Value()) t.failures->Increment(value - t.failures->Value());
      return;
    }
    if (!t.gauges[index]) {
      pm::Labels labels = t.labels(id);
      if (spec.phase) labels["phase"] = spec.phase;
      t.gauges[index] = &trial_gauges[spec.family]->Add(labels);
    }
    t.gauges[index]->Set(value);
  }

  void remove(Trial& t) {
    for (size_t i = 0; i < t.gauges.size(); ++i)
      if (t.gauges[i]) trial_gauges[kTrialSeries[i].family]->Remove(t.gauges[i]);
    if (t.step_gauge) trial_step.Remove(t.step_gauge);
    if (t.failures) trial_failures.Remove(t.failures);
    for (auto& [name, seen] : t.tokens_seen) trial_tokens.Remove(seen.second);
  }
};

ControllerMetrics::ControllerMetrics() : impl_(std::make_unique<Impl>()) {
  for (const char* decision : {"stop", "continue"}) impl_->early_stop.Add({{"decision", decision}});
  impl_->queue.Add({});
  impl_->ingested.Add({});
  impl_->cache_points.Add({});
  impl_->store_blocked.Add({});
  set_trial_counts({});
}

ControllerMetrics::~ControllerMetrics() = default;

prometheus::Registry& ControllerMetrics::registry() { return *impl_->registry; }

void ControllerMetrics::add_executor(const std::string& executor) {
  const pm::Labels l{{"executor", executor}};
  impl_->started.Add(l);
  impl_->failed.Add(l);
  impl_->requeued.Add(l);
  impl_->poll_errors.Add(l);
  impl_->polls.Add(l, kPollBuckets);
}

void ControllerMetrics::attempt_started(const std::string& executor) {
  impl_->started.Add({{"executor", executor}}).Increment();
}

void ControllerMetrics::attempt_failed(const std::string& executor) {
  impl_->failed.Add({{"executor", executor}}).Increment();
}

void ControllerMetrics::attempt_requeued(const std::string& executor) {
  impl_->requeued.Add({{"executor", executor}}).Increment();
}

void ControllerMetrics::executor_polled(const std::string& executor, double seconds, bool error) {
  impl_->polls.Add({{"executor", executor}}, kPollBuckets).Observe(seconds);
  if (error) impl_->poll_errors.Add({{"executor", executor}}).Increment();
}

void ControllerMetrics::early_stop_decision(bool stop) {
  impl_->early_stop.Add({{"decision", stop ? "stop" : "continue"}}).Increment();
}

void ControllerMetrics::set_queue_length(int64_t pending) { impl_->queue.Add({}).Set(static_cast<double>(pending)); }

void ControllerMetrics::store_write(const char* op, double seconds) {
  impl_->store_writes.Add({{"op", op}}, kFastBuckets).Observe(seconds);
}

void ControllerMetrics::http_request(const std::string& route, int status, double seconds) {
  impl_->http.Add({{"route", route.empty() ? "unmatched" : route}, {"code", std::to_string(status)}}, kFastBuckets)
      .Observe(seconds);
}

void ControllerMetrics::set_trial_counts(const std::map<TrialState, int64_t>& counts) {
  for (TrialState s : {TrialState::pending, TrialState::running, TrialState::completed, TrialState::failed,
                       TrialState::cancelled, TrialState::pruned}) {
    auto it = counts.find(s);
    impl_->trials.Add({{"state", trial_state_name(s)}}).Set(it == counts.end() ? 0.0 : static_cast<double>(it->second));
  }
}

void ControllerMetrics::set_metric_cache_points(size_t points) {
  impl_->cache_points.Add({}).Set(static_cast<double>(points));
}

void ControllerMetrics::set_store_blocked_seconds(double seconds) { impl_->store_blocked.Add({}).Set(seconds); }

void ControllerMetrics::trial_active(int64_t trial_id, const std::string& experiment) {
  std::lock_guard lock(impl_->mu);
  auto [it, added] = impl_->active.try_emplace(trial_id);
  if (!added) return;
  it->second.experiment = experiment;
  it->second.last_step.fill(std::numeric_limits<int64_t>::min());
}

void ControllerMetrics::trial_failed_attempts(int64_t trial_id, const std::string& experiment, int64_t failures) {
  std::lock_guard lock(impl_->mu);
  pm::Gauge*& g = impl_->failing[trial_id];
  if (!g) g = &impl_->trial_failed.Add({{"experiment", experiment}, {"trial", std::to_string(trial_id)}});
  g->Set(static_cast<double>(failures));
}

void ControllerMetrics::trial_ended(int64_t trial_id) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->failing.find(trial_id);
  if (it == impl_->failing.end()) return;
  impl_->trial_failed.Remove(it->second);
  impl_->failing.erase(it);
}

void ControllerMetrics::trial_inactive(int64_t trial_id) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->active.find(trial_id);
  if (it == impl_->active.end()) return;
  impl_->remove(it->second);
  impl_->active.erase(it);
}

void ControllerMetrics::report(int64_t trial_id, const std::vector<MetricPoint>& points) {
  impl_->ingested.Add({}).Increment(static_cast<double>(points.size()));
  std::lock_guard lock(impl_->mu);
  auto it = impl_->active.find(trial_id);
  if (it == impl_->active.end()) return;
  Impl::Trial& t = it->second;
  for (const MetricPoint& p : points) {
    if (p.step > t.step) {
      if (!t.step_gauge) t.step_gauge = &impl_->trial_step.Add(t.labels(trial_id));
      t.step = p.step;
      t.step_gauge->Set(static_cast<double>(p.step));
    }
    if (p.name.starts_with(kTokensSeenPrefix)) {  // tokens_seen.<dataset>
      auto& [step, gauge] = t.tokens_seen[p.name.substr(std::strlen(kTokensSeenPrefix))];
      if (!gauge) {
        pm::Labels labels = t.labels(trial_id);
        labels["dataset"] = p.name.substr(std::strlen(kTokensSeenPrefix));
        gauge = &impl_->trial_tokens.Add(labels);
        step = std::numeric_limits<int64_t>::min();
      }
      if (p.step >= step) step = p.step, gauge->Set(p.value);
      continue;
    }
    for (size_t i = 0; i < kTrialSeries.size(); ++i) {
      if (p.name != kTrialSeries[i].worker_metric) continue;
      if (p.step >= t.last_step[i]) {
        t.last_step[i] = p.step;
        impl_->set(t, trial_id, i, p.value);
      }
      break;
    }
  }
}

size_t ControllerMetrics::active_trials() const {
  std::lock_guard lock(impl_->mu);
  return impl_->active.size();
}

std::string ControllerMetrics::serialize() const {
  std::vector<pm::MetricFamily> families;
  {
    std::lock_guard lock(impl_->mu);
    families = impl_->registry->Collect();
  }
  return pm::TextSerializer().Serialize(families);
}

}  // namespace precon::orch
