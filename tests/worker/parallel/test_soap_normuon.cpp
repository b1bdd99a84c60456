// SOAP and NorMuon under real MPI ranks against their single-process run: TP=2, DP=2 and PP=2 (and
// NorMuon's tp_mode = distributed, whose ranks each normalise their part of every neuron) follow
// the one process; a run SIGKILLed after step 9 resumes from its step-6 checkpoint with the same
// bits; a TP=2 checkpoint resumes at TP=1; the keys' bad values are refused with the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

class NextOptimizersParallel : public mpitest::MpiRunFixture {
 protected:
  Result launch(const fs::path& cfg, const std::string& name, int ranks, const std::string& sets) {
    return run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, name, model_ + sets));
  }
  std::string model_;  // the model's and batch's settings (empty: the fixture's)
  double tolerance_ = mpitest::kLossTolerance;
  std::string dp2_log_;  // a line the DP=2 run's log must hold (its share of the owners' work)
  std::vector<std::string> reshard_from_ = {"--set parallel.tensor=2"};  // the TP=2 runs resumed at TP=1

  // The layouts against the single process, the SIGKILL resume and the TP2→TP1 reshard for one
  // optimizer config (d_model 32, 128 tokens a step).
  void check_optimizer(const std::string& opt, const std::vector<std::pair<std::string, std::string>>& layouts) {
    const fs::path cfg = config(opt, 12);
    const std::string every = " --set train.checkpoint_every=6 --set train.eval_every=6";
    Result r = launch(cfg, "one", 1, every);
    ASSERT_EQ(r.status, 0) << r.output;
    for (const auto& [name, sets] : layouts) {
      SCOPED_TRACE(name);
      r = launch(cfg, name, 2, sets + every);
      ASSERT_EQ(r.status, 0) << r.output;
      if (name == "dp2") {
        EXPECT_NE(r.output.find(dp2_log_), std::string::npos) << r.output;
      }
      expect_same_trajectory("one", name, 12, tolerance_);
      fs::remove_all(dir_ / name);
    }
    // SIGKILLed after step 9 (its last checkpoint: step 6), then resumed: every loss bitwise.
    r = run("PRECON_FAULT_KILL_AT=step:9 " + trainer(cfg, "killed", model_ + every));
    EXPECT_NE(r.status, 0) << "the fault hook did not kill the run";
    r = launch(cfg, "killed", 1, every);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    EXPECT_EQ(series("killed", "train_loss"), series("one", "train_loss"));
    EXPECT_EQ(series("killed", "val_loss"), series("one", "val_loss"));
    // Six steps at TP=2, the rest at TP=1 from its checkpoint.
    for (const std::string& tp2 : reshard_from_) {
      SCOPED_TRACE(tp2);
      fs::remove_all(dir_ / "tp2_tp1");
      r = launch(cfg, "tp2_tp1", 2, tp2 + " --set train.steps=6" + every);
      ASSERT_EQ(r.status, 0) << r.output;
      r = launch(cfg, "tp2_tp1", 1, every);
      ASSERT_EQ(r.status, 0) << r.output;
      EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
      expect_same_trajectory("one", "tp2_tp1", 12, tolerance_);
    }
  }
};

// One-sided SOAP on the 32-wide sides (c_attn's and c_fc's fan-in, the projections' fan-out; both
// sides of attn.c_proj), a refresh every 2 steps. SOAP's first update is Adam's first step in the
// eigenbasis of one gradient's factors, a sign per coordinate: a factor whose eigenvalues crowd
// below fp32's resolution (a long side's null space, or the fixture's 13-periodic shard, whose
// gradients have numerical rank near 13) has an arbitrary basis there, which the layouts' last-bit
// differences rotate, and two correct runs part at once (measured 2e-5 to 9e-5 relative in the loss
// on the fixture's shard). So here each rotated side is a matrix's short side, the shard follows a
// bigram law with half its tokens random, and 256 tokens a step give the factors full numerical
// rank; the first SOAP step still turns the sums' 1e-9 into 3e-7 and the runs stay within 4.4e-6
// (TP=2, DP=2) of the single process, while a lost or misplaced direction moves the loss by 1e-3.
TEST_F(NextOptimizersParallel, SoapFollowsTheSingleProcessRunResumesAndReshards) {
  std::mt19937 rng(7);
  std::vector<uint16_t> successor(61), tokens(16000);
  for (size_t i = 0; i < successor.size(); ++i) successor[i] = static_cast<uint16_t>((i * 17 + 5) % 61);
  tokens[0] = 1;
  for (size_t i = 1; i < tokens.size(); ++i)
    tokens[i] = rng() % 2 == 0 ? successor[tokens[i - 1]] : static_cast<uint16_t>(rng() % 61);
  write_shard(dir_ / "train.bin", tokens);
  write_shard(dir_ / "val.bin", std::vector<uint16_t>(tokens.begin(), tokens.begin() + 2400));
  model_ = "--set train.batch_size=16 ";
  tolerance_ = 5e-5;
  // The eight matrices' eigenbases split by cost: each rank keeps its four layers' worth.
  dp2_log_ = "soap: rank 0 keeps the eigenbases of 4 of 8 matrices";
  check_optimizer("[optimizer]\nname = \"soap\"\nlr = 0.003\n[optimizer.soap]\nprecondition_frequency = 2\n"
                  "max_preconditioner_dim = 32\n",
                  {{"tp2", "--set parallel.tensor=2"}, {"dp2", "--set parallel.data=2"},
                   {"pp2", "--set parallel.pipeline=2"}});
  // The refreshes' time is reported as its own phase.
  double eigenbasis = 0;
  for (const auto& [step, s] : series("one", "optim_eigenbasis_seconds")) eigenbasis += s;
  EXPECT_GT(eigenbasis, 0.0);
}

TEST_F(NextOptimizersParallel, NorMuonFollowsTheSingleProcessRunResumesAndReshards) {
  dp2_log_ = "muon: rank 0 orthogonalises 4 of 8 matrices";
  // Under tp_mode distributed each rank checkpoints its own neurons' v (or, for a part that cuts
  // the other dim, the first rank the whole v): one TP=1 run reads them back.
  reshard_from_.push_back("--set parallel.tensor=2 --set optimizer.muon.tp_mode=distributed");
  check_optimizer("[optimizer]\nname = \"muon\"\nlr = 0.02\nweight_decay = 0.01\n[optimizer.adamw]\nlr = 0.003\n"
                  "[optimizer.muon]\nvariant = \"normuon\"\n",
                  // (TP=2 with the default tp_mode, duplicated, runs in the reshard below.)
                  {{"tp2_distributed", "--set parallel.tensor=2 --set optimizer.muon.tp_mode=distributed"},
                   {"dp2", "--set parallel.data=2"},
                   {"pp2", "--set parallel.pipeline=2"}});
}

// What the trainer refuses (exit 2, before any step) names the key: the same validation `precon
// recipe check` and submit run.
TEST_F(NextOptimizersParallel, BadSoapAndNorMuonKeysAreRefusedWithTheKey) {
  const fs::path cfg = config("", 2);
  const std::pair<const char*, const char*> bad[] = {
      {"--set optimizer.name=soap --set optimizer.soap.precondition_frequency=0",
       "optimizer.soap.precondition_frequency"},
      {"--set optimizer.name=soap --set optimizer.soap.shampoo_beta=-0.5", "optimizer.soap.shampoo_beta"},
      {"--set optimizer.name=adamw --set optimizer.muon.variant=normuon", "\"normuon\" is a Muon variant"},
      {"--set optimizer.name=shampoo --set optimizer.muon.beta2=0.9", "only NorMuon reads optimizer.muon.beta2"},
      {"--set optimizer.name=muon --set optimizer.muon.variant=normal", "optimizer.muon.variant"},
  };
  for (const auto& [sets, said] : bad) {
    const Result r = launch(cfg, "bad", 1, sets);
    EXPECT_EQ(r.status, 2) << sets << "\n" << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << sets << "\n" << r.output;
  }
}

}  // namespace
}  // namespace precon::worker
