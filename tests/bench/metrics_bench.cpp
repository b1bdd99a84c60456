// What /metrics costs on the report ingest path: ControllerMetrics::report for a 500-point batch
// (100 records x 5 metrics, as the trainer sends) for an active trial and for one that is not,
// the per-request HTTP and per-write SQLite histogram observations, next to the cost of storing
// the same batch (Store::insert_metrics into a fresh WAL database); and a scrape (serialize) with
// 64 active trials. Prints a table; run by hand.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/store/store.h"

namespace fs = std::filesystem;
using precon::orch::ControllerMetrics;
using precon::orch::MetricPoint;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<MetricPoint> batch(int64_t first_step) {
  std::vector<MetricPoint> points;
  for (int64_t s = first_step; s < first_step + 100; ++s)
    for (const char* name : {"train_loss", "lr", "grad_norm", "step_seconds", "tokens_per_second"})
      points.push_back({name, s, 3.0 / static_cast<double>(s + 1), 1.0 * static_cast<double>(s)});
  return points;
}

// Mean microseconds per call of fn(i) over n calls.
template <class Fn>
double micros(int n, Fn fn) {
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) fn(i);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
}

}  // namespace

int main() {
  const int n = 2000;
  std::vector<std::vector<MetricPoint>> batches;
  for (int i = 0; i < n; ++i) batches.push_back(batch(int64_t{100} * i));

  ControllerMetrics metrics;
  metrics.add_executor("local");
  metrics.trial_active(1, "bench");
  const double active = micros(n, [&](int i) { metrics.report(1, batches[static_cast<size_t>(i)]); });
  const double inactive = micros(n, [&](int i) { metrics.report(2, batches[static_cast<size_t>(i)]); });
  const double http = micros(100000, [&](int) { metrics.http_request("report", 200, 0.001); });
  const double write = micros(100000, [&](int) { metrics.store_write("insert_metrics", 0.001); });

  const fs::path dir = fs::temp_directory_path() / ("precon_metrics_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  double insert = 0;
  {
    precon::orch::Store store(dir / "bench.db");
    precon::orch::ExperimentRow e;
    e.name = "bench";
    precon::orch::TrialRow t;
    const int64_t exp = store.create_experiment(e, {t});
    const int64_t trial = store.trials(exp).at(0).id;
    insert = micros(n, [&](int i) { store.insert_metrics(trial, batches[static_cast<size_t>(i)]); });
  }
  fs::remove_all(dir);

  for (int64_t t = 10; t < 74; ++t) {
    metrics.trial_active(t, "bench");
    metrics.report(t, {{"train_loss", 1, 2.5, 0}, {"val_loss", 1, 2.5, 0}, {"tokens_per_second", 1, 1e4, 0},
                       {"step_seconds", 1, 0.1, 0}, {"optim_newton_schulz_seconds", 1, 0.01, 0}});
  }
  size_t bytes = 0;
  const double scrape = micros(200, [&](int) { bytes = metrics.serialize().size(); });

  const double per_request = active + http + write;
  std::printf("%-62s %12s\n", "case", "value");
  std::printf("%-62s %12.2f\n", "store insert_metrics, 500-point batch, us", insert);
  std::printf("%-62s %12.2f\n", "metrics report, 500 points, active trial, us", active);
  std::printf("%-62s %12.2f\n", "metrics report, 500 points, trial not active, us", inactive);
  std::printf("%-62s %12.3f\n", "HTTP duration observation, us", http);
  std::printf("%-62s %12.3f\n", "SQLite write duration observation, us", write);
  std::printf("%-62s %11.2f%%\n", "instrumentation per report / store insert", 100.0 * per_request / insert);
  std::printf("%-62s %12.1f\n", ("scrape: serialize, 64 active trials (" + std::to_string(bytes) + " bytes), us").c_str(),
              scrape);
  return 0;
}
