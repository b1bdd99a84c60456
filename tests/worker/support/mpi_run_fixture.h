// The fixture of the multi-rank trainer tests (test_parallel.cpp, test_pipeline.cpp): a tiny
// model on a small synthetic shard, precon-train started directly or under `mpirun -np N`
// (oversubscribed, one thread a rank), and trajectories compared step by step from metrics.jsonl.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/common/test_util.h"
#include "worker/data/shard.h"

namespace precon::worker::mpitest {

namespace fs = std::filesystem;

// fp32 data parallelism sums the same gradients in another order (per rank, then across ranks)
// and takes the mean of per-slice means: measured per-step differences are ~1e-8 relative on
// these runs; 2e-5 over 20 steps leaves room for Muon's and Shampoo's amplification, while a
// missing all-reduce or a wrong scale moves the loss by 1e-3 or more within a few steps.
constexpr double kLossTolerance = 2e-5;

using Result = test::CommandResult;

class MpiRunFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon_parallel_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(11);
    std::vector<uint16_t> tokens(8000);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<uint16_t>((i % 13) * 4 + (rng() % 5 == 0 ? rng() % 50 : 0)) % 61;
    write_shard(dir_ / "train.bin", tokens);
    write_shard(dir_ / "val.bin", std::vector<uint16_t>(tokens.begin(), tokens.begin() + 1200));
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path config(const std::string& extra, int steps = 20) {
    const fs::path p = dir_ / ("config_" + std::to_string(configs_++) + ".toml");
    std::ofstream(p) << "[model]\nn_layer = 2\nn_head = 2\nd_model = 32\nseq_len = 16\nvocab_size = 61\n"
                     << "[data]\ntrain = \"" << (dir_ / "train.bin").string() << "\"\nval = \""
                     << (dir_ / "val.bin").string() << "\"\n"
                     << "[train]\nsteps = " << steps << "\nbatch_size = 8\neval_every = 10\neval_batches = 2\n"
                     << "checkpoint_every = 10\nthreads = 1\n"
                     << extra;
    return p;
  }

  static Result run(const std::string& cmd) { return test::run_command(cmd); }
  // Under the sanitizer build the ranks skip leak checking: OpenMPI's plugins, unloaded at
  // MPI_Finalize, leave allocations LeakSanitizer can only attribute to "<unknown module>". The
  // trainer's own code is leak-checked by the single-process runs, which share it.
  static std::string mpirun(int ranks) {
    return "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
           "OMPI_MCA_btl=self,vader mpirun -np " +
           std::to_string(ranks) + " --oversubscribe --bind-to none ";
  }
  std::string trainer(const fs::path& cfg, const std::string& run_dir, const std::string& sets = "") {
    return std::string(PRECON_TRAIN_BIN) + " --config " + cfg.string() + " --run-dir " + (dir_ / run_dir).string() +
           " " + sets;
  }
  // metric name -> step -> value, from metrics.jsonl.
  std::map<int, double> series(const std::string& run_dir, const std::string& metric) {
    std::map<int, double> out;
    std::ifstream in(dir_ / run_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains(metric)) out[j["step"].get<int>()] = j[metric].get<double>();
    }
    return out;
  }
  void expect_same_trajectory(const std::string& a, const std::string& b, size_t steps,
                              double tolerance = kLossTolerance) {
    for (const char* metric : {"train_loss", "val_loss"}) {
      const auto x = series(a, metric), y = series(b, metric);
      ASSERT_EQ(x.size(), metric == std::string("train_loss") ? steps : x.size()) << a << " " << metric;
      ASSERT_EQ(x.size(), y.size()) << b << " " << metric;
      double worst = 0;
      for (const auto& [step, v] : x) worst = std::max(worst, std::fabs(v - y.at(step)) / std::fabs(v));
      std::printf("%s vs %s %s: max relative difference %.3g\n", a.c_str(), b.c_str(), metric, worst);
      EXPECT_LT(worst, tolerance) << a << " vs " << b << " " << metric;
    }
  }

  // Starts a 2-rank job (run directory "killed"), delivers `sig` to rank 1 once training runs,
  // returns the job's result and how long it lasted after the signal.
  std::pair<Result, double> signal_rank_one(const std::string& cmd_prefix, const std::string& trainer_cmd, int sig) {
    const fs::path pids = dir_ / "pids";
    fs::create_directories(pids);
    // Each rank records its pid, then becomes the trainer.
    const std::string cmd = cmd_prefix + "sh -c 'echo $$ > " + pids.string() + "/$OMPI_COMM_WORLD_RANK; exec " +
                            trainer_cmd + "'";
    Result r;
    std::thread job([&] { r = test::run_command(cmd); });
    const fs::path victim = pids / "1";
    for (int i = 0; i < 300 && !fs::exists(dir_ / "killed" / "metrics.jsonl"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pid_t pid = 0;
    std::ifstream(victim) >> pid;
    const auto t0 = std::chrono::steady_clock::now();
    if (pid > 0) ::kill(pid, sig);
    job.join();
    EXPECT_GT(pid, 0) << "rank 1 recorded no pid";
    return {r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }

  fs::path dir_;
  int configs_ = 0;
};

// The fixture's model as a Llama: four query heads of 8 channels sharing two kv heads, SwiGLU 48
// wide, untied head; two micro-batches per rank so that the pipeline's schedule has work in flight.
inline const std::string kLlama =
    "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 --set model.ffn_hidden=48 "
    "--set train.micro_batch_size=2 ";

inline const char* kOptimizers[] = {
    "[optimizer]\nname = \"adamw\"\nlr = 0.003\nweight_decay = 0.1\n",
    "[optimizer]\nname = \"muon\"\nlr = 0.02\nweight_decay = 0.01\n[optimizer.adamw]\nlr = 0.003\n",
    "[optimizer]\nname = \"shampoo\"\nlr = 0.003\n[optimizer.shampoo]\nprecondition_frequency = 5\n"
    "max_preconditioner_dim = 40\n",
};

}  // namespace precon::worker::mpitest
