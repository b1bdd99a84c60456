// Store benchmark: metric ingest through Store::insert_metrics (16 reporter threads and one),
// and downsampled queries of a 1,000,000-point series. Prints a table.
// Usage: precon_store_bench [--seconds S] [--dir DIR]   (DIR default: the temp directory)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "orchestrator/store/store.h"

namespace {

using namespace precon::orch;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr size_t kBatch = 500;
constexpr int kReporters = 16;
constexpr int64_t kQueryPoints = 1'000'000;
constexpr size_t kMaxPoints = 2000;
const char* const kNames[] = {"train_loss", "lr", "grad_norm", "tokens_per_s", "step_seconds"};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One reporter's batches: every metric at each of 100 consecutive steps.
std::vector<MetricPoint> batch_at(int64_t first_step) {
  std::vector<MetricPoint> b;
  b.reserve(kBatch);
  for (int64_t step = first_step; b.size() < kBatch; ++step)
    for (const char* name : kNames) b.push_back({name, step, 1.0 / double(step + 1), double(step)});
  return b;
}

// Points/s from `threads` reporters, each sending batches to its own trial for `seconds`.
double ingest(Store& store, const std::vector<int64_t>& trials, int threads, double seconds) {
  std::atomic<int64_t> points{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      int64_t step = store.trial(trials[t])->last_step + 1;
      while (!stop) {
        auto b = batch_at(step);
        step = b.back().step + 1;
        points += int64_t(store.insert_metrics(trials[t], b));
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  return double(points) / seconds_since(t0);
}

struct Latency {
  double p50_ms, p99_ms, max_ms;
};

Latency query_latency(Store& store, int64_t trial, int n) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    auto pts = store.metrics(trial, "loss", kMaxPoints);
    ms.push_back(seconds_since(t0) * 1e3);
    if (pts.size() > kMaxPoints || pts.empty()) std::fprintf(stderr, "bad query result: %zu points\n", pts.size());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 99 / 100)], ms.back()};
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  fs::path dir = fs::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::stod(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  const fs::path path = dir / ("precon_store_bench_" + std::to_string(getpid()) + ".db");
  try {
    Store store(path);
    std::vector<TrialRow> rows(kReporters + 1);
    for (size_t i = 0; i < rows.size(); ++i) rows[i].index = int64_t(i);
    ExperimentRow e;
    e.name = "bench";
    const int64_t exp = store.create_experiment(e, rows);
    std::vector<int64_t> trials;
    for (const auto& t : store.trials(exp)) trials.push_back(t.id);
    const int64_t query_trial = trials.back();

    std::printf("%-52s %14s\n", "store benchmark", "result");
    std::printf("%-52s %14.0f\n", "ingest, 16 reporters, batches of 500 (points/s)",
                ingest(store, trials, kReporters, seconds));
    std::printf("%-52s %14.0f\n", "ingest, 1 reporter, batches of 500 (points/s)", ingest(store, trials, 1, seconds));

    const auto t0 = Clock::now();
    for (int64_t off = 0; off < kQueryPoints; off += int64_t(kBatch)) {
      std::vector<MetricPoint> b;
      for (int64_t s = off; s < off + int64_t(kBatch); ++s)
        b.push_back({"loss", s, 3.0 / double(s + 1) + 1e-3 * double(s % 97), double(s)});
      store.insert_metrics(query_trial, b);
    }
    std::printf("%-52s %14.0f\n", "ingest of the 1M-point series (points/s)", double(kQueryPoints) / seconds_since(t0));

    const auto t1 = Clock::now();
    auto first = store.metrics(query_trial, "loss", kMaxPoints);
    std::printf("%-52s %14.1f\n", "query 1M -> 2000, first (series cached as written) (ms)", seconds_since(t1) * 1e3);
    {
      Store reopened(path);  // a restarted controller: its first query reads SQLite
      const auto t2 = Clock::now();
      reopened.metrics(query_trial, "loss", kMaxPoints);
      std::printf("%-52s %14.1f\n", "query 1M -> 2000, first after a restart (ms)", seconds_since(t2) * 1e3);
    }
    const Latency warm = query_latency(store, query_trial, 300);
    std::printf("%-52s %14.2f\n", "query 1M -> 2000, p50 (ms)", warm.p50_ms);
    std::printf("%-52s %14.2f\n", "query 1M -> 2000, p99 (ms)", warm.p99_ms);

    // A dashboard reading while 16 reporters write.
    Latency busy{};
    std::thread q([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      busy = query_latency(store, query_trial, 100);
    });
    const double rate = ingest(store, trials, kReporters, seconds);
    q.join();
    std::printf("%-52s %14.2f\n", "query 1M -> 2000 beside 16 reporters, p99 (ms)", busy.p99_ms);
    std::printf("%-52s %14.0f\n", "ingest, 16 reporters, beside queries (points/s)", rate);
    std::printf("%-52s %14zu\n", "points returned by a query", first.size());
    std::printf("%-52s %14.1f\n", "database size (MB)", double(fs::file_size(path)) / 1e6);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "store_bench: %s\n", ex.what());
    return 1;
  }
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path.string() + suffix);
  return 0;
}
