// Data and tensor parallelism against the single-process run: precon-train under `mpirun -np N`
// (real MPI ranks, oversubscribed, one thread each) must follow the trajectory one process follows,
// for every optimizer, at DP=2, TP=2 and TP=2×DP=2; gradient accumulation must equal the big batch;
// checkpoints written at one layout resume at another; a bad layout, a failing rank, a killed rank
// and a signal to one rank end the job as they should.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class Parallel : public mpitest::MpiRunFixture {};
using mpitest::Result;
using mpitest::kOptimizers;
using mpitest::kLossTolerance;

TEST_F(Parallel, DataParallelFollowsTheSingleProcessRunForEveryOptimizer) {
  for (const char* opt : kOptimizers) {
    SCOPED_TRACE(opt);
    const fs::path one = config(opt), two = config(std::string(opt) + "[parallel]\ndata = 2\n");
    Result r = run(trainer(one, "one"));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(mpirun(2) + trainer(two, "dp2"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1: layout: 2 data-parallel rank(s) over mpi"), std::string::npos) << r.output;
    if (std::string(opt).find("muon") != std::string::npos) {
      // Each matrix's Newton–Schulz runs on one rank: 8 matrices, 4 each.
      EXPECT_NE(r.output.find("rank 0: routing: muon: 8 tensors"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("muon: rank 0 orthogonalises 4 of 8 matrices"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("muon: rank 1 orthogonalises 4 of 8 matrices"), std::string::npos) << r.output;
    }
    if (std::string(opt).find("shampoo") != std::string::npos) {
      // Each block's inverse roots are computed on one rank (24 blocks of 40 × 40 or smaller).
      EXPECT_NE(r.output.find("shampoo: rank 0 computes the inverse roots of 12 of 24 blocks"), std::string::npos)
          << r.output;
    }
    expect_same_trajectory("one", "dp2", 20);
    fs::remove_all(dir_ / "one");
    fs::remove_all(dir_ / "dp2");
  }
}

TEST_F(Parallel, TensorParallelAndBothFollowTheSingleProcessRunForEveryOptimizer) {
  // TP=2: heads, MLP columns and the vocabulary split over two ranks; TP=2 × DP=2 on four.
  for (const char* opt : kOptimizers) {
    SCOPED_TRACE(opt);
    const fs::path cfg = config(opt);
    ASSERT_EQ(run(trainer(cfg, "one")).status, 0);
    Result r = run(mpirun(2) + trainer(cfg, "tp2", "--set parallel.tensor=2"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("layout: 1 data-parallel rank(s) over mpi, 2 tensor-parallel"), std::string::npos)
        << r.output;
    expect_same_trajectory("one", "tp2", 20);
    r = run(mpirun(4) + trainer(cfg, "tp2dp2", "--set parallel.tensor=2 --set parallel.data=2"));
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_trajectory("one", "tp2dp2", 20);
    for (const char* d : {"one", "tp2", "tp2dp2"}) fs::remove_all(dir_ / d);
  }
}

TEST_F(Parallel, TensorParallelCheckpointsReshardToEveryLayout) {
  // The checkpoint holds the full model and full optimizer state whatever wrote it: TP2 -> TP1,
  // TP1 -> TP2 and TP2×DP2 -> TP1×DP1 continue the trajectory.
  const fs::path cfg = config(kOptimizers[1]);
  ASSERT_EQ(run(trainer(cfg, "straight")).status, 0);
  struct Case {
    const char* name;
    int first_ranks;
    std::string first;
    int second_ranks;
    std::string second;
  };
  const Case cases[] = {
      {"tp2_tp1", 2, "--set parallel.tensor=2", 1, ""},
      {"tp1_tp2", 1, "", 2, "--set parallel.tensor=2"},
      {"tp2dp2_tp1dp1", 4, "--set parallel.tensor=2 --set parallel.data=2", 1, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto launch = [&](int ranks) { return ranks > 1 ? mpirun(ranks) : std::string(); };
    Result r = run(launch(c.first_ranks) + trainer(cfg, c.name, c.first + " --set train.steps=10"));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(launch(c.second_ranks) + trainer(cfg, c.name, c.second));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    expect_same_trajectory("straight", c.name, 20);
  }
}

TEST_F(Parallel, RanksWithoutShampooBlocksStillFollowTheRun) {
  // One layer: 4 matrices, one block each, over 8 ranks: half the ranks own no block and must
  // still enter every collective (a known hang in other implementations), and the run must not change.
  const fs::path cfg = config(kOptimizers[2], 10);
  const std::string sets = "--set model.n_layer=1 --set optimizer.shampoo.max_preconditioner_dim=1024";
  ASSERT_EQ(run(trainer(cfg, "one", sets)).status, 0);
  Result r = run(mpirun(8) + trainer(cfg, "dp8", sets + " --set parallel.data=8"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("shampoo: rank 7 computes the inverse roots of 0 of 4 blocks"), std::string::npos) << r.output;
  // Eight slices of one sequence each sum in a more different order than two halves do
  // (measured 1.2e-5 after Shampoo's roots amplify it): a wider bound, still far below what a
  // missing block or a wrong root would do (> 1e-3).
  expect_same_trajectory("one", "dp8", 10, 1e-4);
}

TEST_F(Parallel, TensorParallelRegionsMatchNaiveReferences) {
  // Each region's forward and backward, the vocabulary-parallel embedding and cross-entropy on
  // two ranks against the same values computed in one process (tests/worker/parallel/tp_regions_check.cpp).
  Result r = run(mpirun(2) + PRECON_TP_REGIONS_CHECK);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("all tensor-parallel checks passed on 2 ranks"), std::string::npos) << r.output;
}

TEST_F(Parallel, TheToleranceTellsAHalfBatchFromTheWholeOne) {
  // What a rank that skipped the all-reduce would train on: half the batch. Its trajectory must
  // be far outside kLossTolerance, or the comparisons above prove nothing.
  const fs::path whole = config(kOptimizers[0]);
  ASSERT_EQ(run(trainer(whole, "whole")).status, 0);
  ASSERT_EQ(run(trainer(whole, "half", "--set train.batch_size=4")).status, 0);
  const auto a = series("whole", "train_loss"), b = series("half", "train_loss");
  double worst = 0;
  for (const auto& [step, v] : a) worst = std::max(worst, std::fabs(v - b.at(step)) / std::fabs(v));
  EXPECT_GT(worst, 100 * kLossTolerance);
}

TEST_F(Parallel, GradientAccumulationEqualsTheBigBatch) {
  const fs::path big = config(kOptimizers[1]);
  ASSERT_EQ(run(trainer(big, "big")).status, 0);
  Result r = run(trainer(big, "micro", "--set train.micro_batch_size=2"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_trajectory("big", "micro", 20);
  // Both at once: two ranks, two micro-batches of two sequences each.
  r = run(mpirun(2) + trainer(big, "both", "--set parallel.data=2 --set train.micro_batch_size=2"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 micro-batch(es) of 2 sequence(s)"), std::string::npos) << r.output;
  expect_same_trajectory("big", "both", 20);
}

TEST_F(Parallel, CheckpointOfTwoRanksResumesInOneAndTheOtherWay) {
  const fs::path cfg = config(kOptimizers[2]);
  ASSERT_EQ(run(trainer(cfg, "straight")).status, 0);
  // DP2 -> DP1: two ranks stop at step 10 (a signal-free stop: the run's own end), one finishes.
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "resharded", "--set parallel.data=2 --set train.steps=10")).status, 0);
  Result r = run(trainer(cfg, "resharded"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("straight", "resharded", 20);
  // DP1 -> DP2.
  ASSERT_EQ(run(trainer(cfg, "grown", "--set train.steps=10")).status, 0);
  r = run(mpirun(2) + trainer(cfg, "grown", "--set parallel.data=2"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_trajectory("straight", "grown", 20);
}

TEST_F(Parallel, ALayoutThatDoesNotFitTheRanksIsAConfigError) {
  const fs::path cfg = config(kOptimizers[0]);
  Result r = run(mpirun(2) + trainer(cfg, "bad"));  // parallel.data = 1, two ranks
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.tensor × parallel.data × parallel.pipeline = 1 × 1 × 1 needs 1 rank(s), but the "
                          "launcher started 2"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "metrics.jsonl"));
}

TEST_F(Parallel, AFailingRankEndsTheJobWithItsRankAndReason) {
  const fs::path cfg = config(kOptimizers[0], 200);
  const auto t0 = std::chrono::steady_clock::now();
  Result r = run(mpirun(2) + "-x PRECON_FAULT_RANK_ERROR=1:5 " +
                 trainer(cfg, "fails", "--set parallel.data=2"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("precon-train: rank 1: error: injected fault at step 5"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 30.0) << r.output;
}

TEST_F(Parallel, AKilledRankEndsTheJobInSeconds) {
  const fs::path cfg = config(kOptimizers[0], 100000);
  auto [r, seconds] = signal_rank_one(mpirun(2), trainer(cfg, "killed", "--set parallel.data=2"), SIGKILL);
  std::printf("killed rank 1: the job ended %.2f s later with status %d\n", seconds, r.status);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}

TEST_F(Parallel, ARankThatCrashesSaysSoWithItsRankAndTheJobEndsInSeconds) {
  // SIGSEGV to rank 1: its own report names the rank and the signal, with a stack, and the job
  // ends non-zero like for a killed rank. (The sanitizer builds keep their own reports instead.)
  const fs::path cfg = config(kOptimizers[0], 100000);
  auto [r, seconds] = signal_rank_one(mpirun(2), trainer(cfg, "killed", "--set parallel.data=2"), SIGSEGV);
  std::printf("SIGSEGV to rank 1: the job ended %.2f s later with status %d\n", seconds, r.status);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
  if (!test::sanitized_build()) {
    EXPECT_NE(r.output.find("precon-train: rank 1: fatal signal 11 (Segmentation fault); stack:"), std::string::npos)
        << r.output;
  }
}

TEST_F(Parallel, ASignalToOneRankCheckpointsAllAtTheSameStep) {
  const fs::path cfg = config(kOptimizers[0], 100000);
  const fs::path pids = dir_ / "pids";
  fs::create_directories(pids);
  const std::string cmd = mpirun(2) + "sh -c 'echo $$ > " + pids.string() + "/$OMPI_COMM_WORLD_RANK; exec " +
                          trainer(cfg, "signalled", "--set parallel.data=2 --set train.checkpoint_every=0") + "'";
  Result r;
  std::thread job([&] { r = run(cmd); });
  // Two steps logged: both ranks are past their set-up and in the step loop, handlers installed.
  const auto lines = [&] {
    std::ifstream in(dir_ / "signalled" / "metrics.jsonl");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  for (int i = 0; i < 600 && lines() < 2; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_GE(lines(), 2) << "the trainer logged no steps within 30 s";
  pid_t pid = 0;
  std::ifstream(pids / "1") >> pid;
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGUSR1);  // rank 1 only: rank 0 must learn it from the per-step agreement
  job.join();
  EXPECT_EQ(r.status, 75) << r.output;
  EXPECT_NE(r.output.find("rank 0: signal received: checkpointed at step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: signal received: checkpointed at step"), std::string::npos) << r.output;
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "signalled" / "checkpoints")) checkpoints += e.is_directory();
  EXPECT_EQ(checkpoints, 1);
  // Both ranks name the same step.
  auto step_of = [&](const std::string& who) {
    const std::string marker = who + ": signal received: checkpointed at step ";
    const size_t at = r.output.find(marker);
    return at == std::string::npos ? -1 : std::atoi(r.output.c_str() + at + marker.size());
  };
  EXPECT_GT(step_of("rank 0"), 0);
  EXPECT_EQ(step_of("rank 0"), step_of("rank 1"));
}

}  // namespace
}  // namespace precon::worker
