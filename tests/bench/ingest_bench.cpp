// Metric ingest through the controller's HTTP report endpoint into SQLite: 16 concurrent
// reporters (as 16 workers would), each posting batches of 500 points with its trial's token.
// Prints a table with the sustained points/s (target >= 100,000) and the metric query latency
// for a trial's series downsampled to 2,000 points.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/controller.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int reporters = 16, batch = 500;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 8.0;
  const fs::path dir = fs::temp_directory_path() / ("precon_ingest_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // Stand-in workers: each leaves the token it was launched with in its run directory (the store
  // keeps only its hash) and waits, so that its trial stays running and accepts reports.
  const fs::path trainer = dir / "fake-train.sh";
  std::ofstream(trainer) << "#!/bin/sh\nprintf '%s\\n' \"$PRECON_TRIAL_TOKEN\" > \"$4/token.tmp\" && mv \"$4/token.tmp\" \"$4/token.txt\"\n"
                            "while [ ! -e \"$4/finish\" ]; do sleep 0.1; done\n";
  fs::permissions(trainer, fs::perms::owner_all);
  precon::orch::ControllerOptions o;
  o.db = dir / "bench.db";
  o.run_root = dir / "runs";
  o.trainer = trainer;
  o.cpu_slots = reporters;
  o.admin_token = "bench";
  o.log = [](const std::string&) {};
  precon::orch::Controller controller(o);
  controller.start();
  std::string recipe = "[sweep]\nmax_concurrent = 16\n[sweep.parameters]\n\"train.seed\" = [";
  for (int i = 0; i < reporters; ++i) recipe += std::to_string(i) + (i + 1 < reporters ? ", " : "]\n");
  std::vector<std::pair<int64_t, std::string>> trials;
  std::vector<fs::path> run_dirs;
  {
    precon::orch::Store& store = controller.store();
    fs::create_directories(dir / "data");
    // The recipe's default data paths must exist for submission; point them at a stub pair.
    const int64_t id = [&] {
      std::FILE* f = std::fopen((dir / "data" / "x.bin").c_str(), "w");
      std::fclose(f);
      return controller.submit_recipe(recipe, "bench.toml",
                                      {"data.train=" + (dir / "data/x.bin").string(), "data.val=" + (dir / "data/x.bin").string()});
    }();
    for (const auto& t : store.trials(id)) {
      const fs::path token_file = fs::path(t.run_dir) / "token.txt";
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      while (!fs::exists(token_file) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::string token;
      std::getline(std::ifstream(token_file), token);
      trials.emplace_back(t.id, token);
      run_dirs.push_back(t.run_dir);
    }
  }
  const std::string url = controller.url();
  std::atomic<int64_t> points{0}, failures{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < reporters; ++r) {
    threads.emplace_back([&, r] {
      int64_t step = 0;
      while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
        json records = json::array();
        for (int i = 0; i < batch / 5; ++i) {
          ++step;
          records.push_back({{"step", step},
                             {"time", 1.0 * step},
                             {"values", {{"train_loss", 3.0 / step}, {"lr", 1e-3}, {"grad_norm", 1.0},
                                         {"step_seconds", 0.1}, {"tokens_per_second", 1e4}}}});
        }
        json body = {{"trial", std::to_string(trials[r].first)}, {"records", records}};
        auto resp = precon::orch::http_request(url, "POST", "/api/v1/report", body.dump(),
                                               {{"Authorization", "Bearer " + trials[r].second},
                                                {"Content-Type", "application/json"}});
        if (resp.status == 200) points += batch;
        else ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double rate = points.load() / elapsed;

  // Query latency: one trial's train_loss downsampled to 2,000 points, through the API.
  std::vector<double> lat;
  for (int i = 0; i < 200; ++i) {
    auto t0 = Clock::now();
    auto resp = precon::orch::http_request(url, "GET", "/api/v1/trials/" + std::to_string(trials[0].first) +
                                                           "/metrics?name=train_loss&max_points=2000");
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (resp.status != 200) ++failures;
  }
  std::sort(lat.begin(), lat.end());
  const int64_t series = controller.store().metric_count(trials[0].first);
  std::printf("%-52s %12s %10s\n", "case", "value", "target");
  std::printf("%-52s %12.0f %10s  %s\n", "HTTP report ingest, 16 reporters, points/s", rate, ">= 100000",
              rate >= 100000 ? "ok" : "MISSED");
  std::printf("%-52s %12.1f %10s\n", ("metric query p50 ms (" + std::to_string(series / 5) + " points -> 2000)").c_str(),
              lat[lat.size() / 2], "");
  std::printf("%-52s %12.1f %10s\n", "metric query p99 ms", lat[lat.size() * 99 / 100], "");
  std::printf("failed requests: %lld\n", static_cast<long long>(failures.load()));
  for (const fs::path& run_dir : run_dirs) std::ofstream(run_dir / "finish").put('\n');
  controller.stop();
  fs::remove_all(dir);
  return failures.load() == 0 ? 0 : 1;
}
