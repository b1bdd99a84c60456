// Multi-token prediction (model.mtp_layers) under the parallel layouts against the single-process
// run: precon-train at TP=2 (the module's block split as the model's blocks are, eh_proj and its
// norms replicated, the embedding rows of the future tokens from each rank's vocabulary slice) and
// DP=2 follows one process's train_loss, val_loss and mtp_loss, with grouped-query attention under
// Muon and with MLA under AdamW; a checkpoint written at TP=2 resumes at one process on the straight
// run's trajectory; a run killed after step 9 and resumed from step 6 is bitwise the straight one.
// PP=2 (the modules on the last stage, with the embedding) follows one process too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

// The fixture's Llama (two layers) with two MTP modules.
const std::string kMtpLlama = mpitest::kLlama + "--set model.mtp_layers=2 --set model.mtp_loss_coeff=0.5 ";
const std::string kMtpMla =
    "--set model.arch=llama --set model.n_head=4 --set model.ffn_hidden=48 --set model.mla.kv_lora_rank=16 "
    "--set model.mla.q_lora_rank=12 --set model.mla.qk_nope_head_dim=8 --set model.mla.qk_rope_head_dim=4 "
    "--set model.mla.v_head_dim=16 --set train.micro_batch_size=2 --set model.mtp_layers=1 ";

class MtpParallel : public mpitest::MpiRunFixture {
 protected:
  Result launch(const fs::path& cfg, const std::string& name, int ranks, const std::string& sets) {
    return run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, name, sets));
  }
  // The MTP loss of b follows a's, step by step.
  void expect_same_mtp_loss(const std::string& a, const std::string& b, size_t steps) {
    const auto x = series(a, "mtp_loss"), y = series(b, "mtp_loss");
    ASSERT_EQ(x.size(), steps) << a;
    ASSERT_EQ(y.size(), steps) << b;
    double worst = 0;
    for (const auto& [step, v] : x) worst = std::max(worst, std::fabs(v - y.at(step)) / std::fabs(v));
    std::printf("%s vs %s mtp_loss: %.4f -> %.4f, max relative difference %.3g\n", a.c_str(), b.c_str(),
                x.begin()->second, x.rbegin()->second, worst);
    EXPECT_LT(worst, mpitest::kLossTolerance) << a << " vs " << b << " mtp_loss";
  }

  // One process, then the same at parallel.<layout> = 2: the same losses.
  void check_layout(const char* name, const char* optimizer, const std::string& model, const std::string& layout,
                    const std::string& extra = "") {
    SCOPED_TRACE(name);
    const fs::path cfg = config(optimizer, 8);
    const std::string one = std::string(name) + "_one", two = std::string(name) + "_" + layout + "2";
    Result r = launch(cfg, one, 1, model);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto mtp = series(one, "mtp_loss");
    ASSERT_EQ(mtp.size(), 8u);
    EXPECT_LT(mtp.rbegin()->second, mtp.begin()->second) << "the MTP loss did not fall";
    r = launch(cfg, two, 2, model + "--set parallel." + layout + "=2 " + extra);
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_trajectory(one, two, 8);
    expect_same_mtp_loss(one, two, 8);
  }
};

TEST_F(MtpParallel, TensorParallelFollowsTheSingleProcessRun) {
  check_layout("gqa_muon", mpitest::kOptimizers[1], kMtpLlama, "tensor");
  check_layout("mla_adamw", mpitest::kOptimizers[0], kMtpMla, "tensor");
}

TEST_F(MtpParallel, DataParallelFollowsTheSingleProcessRun) {
  check_layout("gqa_muon", mpitest::kOptimizers[1], kMtpLlama, "data");
}

TEST_F(MtpParallel, CheckpointsResumeBitwiseAndReshard) {
  const fs::path cfg = config(mpitest::kOptimizers[1], 12);
  const std::string every = "--set train.checkpoint_every=6 --set train.eval_every=6 ";
  ASSERT_EQ(launch(cfg, "straight", 1, kMtpLlama + every).status, 0);
  // SIGKILLed after step 9 (its last checkpoint: step 6), resumed: the same bits.
  EXPECT_NE(run("PRECON_FAULT_KILL_AT=step:9 " + trainer(cfg, "resumed", kMtpLlama + every)).status, 0);
  Result r = launch(cfg, "resumed", 1, kMtpLlama + every);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_EQ(series("resumed", "train_loss"), series("straight", "train_loss"));
  EXPECT_EQ(series("resumed", "mtp_loss"), series("straight", "mtp_loss"));
  // Six steps at TP=2, the rest at one process: the modules' rows gathered and cut again.
  r = launch(cfg, "tp2_tp1", 2, kMtpLlama + every + "--set parallel.tensor=2 --set train.steps=6");
  ASSERT_EQ(r.status, 0) << r.output;
  r = launch(cfg, "tp2_tp1", 1, kMtpLlama + every);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("straight", "tp2_tp1", 12);
  expect_same_mtp_loss("straight", "tp2_tp1", 12);
}

// The modules on the last stage, which holds the embedding too (its rows for the future tokens);
// the embedding's gradient summed between the first and the last stage as a tied one's is; with a
// tied head as well, and interleaved (the modules on the last virtual stage).
TEST_F(MtpParallel, PipelineFollowsTheSingleProcessRun) {
  check_layout("gqa_muon", mpitest::kOptimizers[1], kMtpLlama, "pipeline");
  check_layout("tied_adamw", mpitest::kOptimizers[0], kMtpLlama + "--set model.tie_embeddings=true ", "pipeline");
  check_layout("interleaved", mpitest::kOptimizers[0], kMtpLlama + "--set model.n_layer=4 ", "pipeline",
               "--set parallel.virtual_stages=2");
}

}  // namespace
}  // namespace precon::worker
