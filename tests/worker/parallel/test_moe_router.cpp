// DeepSeek-V3's sigmoid router (model.moe.router = "sigmoid": a bias moved after each step by the
// loads summed over every rank, group-limited routing, the sequence-wise balance loss) under
// `mpirun -np N` against the single process: TP2, DP2, EP2, PP2 and TP2×EP2 follow its trajectory (train and
// validation losses, the balance loss, the worst expert's load and the bias's largest magnitude,
// which differs at once if a rank moved its bias by its own tokens' loads only); a run checkpointed
// and resumed continues bitwise, the bias included; and an EP2 checkpoint resumes on one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/worker/support/mpi_run_fixture.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/ckpt/safetensors.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

// Eight experts of width 8 (top 2 of 4 groups of 2, 2 groups kept) and a shared one after a dense
// first layer.
const std::string kRouter =
    "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 --set model.ffn_hidden=48 "
    "--set model.moe.experts=8 --set model.moe.top_k=2 --set model.moe.ffn_hidden=8 "
    "--set model.moe.shared_experts=1 --set model.moe.first_dense_layers=1 --set model.moe.router=sigmoid "
    "--set model.moe.aux_loss_coeff=0 --set model.moe.n_group=4 --set model.moe.topk_group=2 "
    "--set model.moe.route_scale=2 --set model.moe.bias_update_rate=0.01 --set model.moe.seq_aux_loss_coeff=0.01 "
    "--set train.micro_batch_size=2 ";

class MoeRouterParallel : public mpitest::MpiRunFixture {
 protected:
  Result launch(const fs::path& cfg, const std::string& name, int ranks, const std::string& sets) {
    return run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, name, kRouter + sets));
  }
  // The router's metrics of run b against run a's, step by step.
  void expect_same_routing(const std::string& a, const std::string& b, double tolerance) {
    for (const char* metric : {"moe_aux_loss", "moe_load_max", "moe_bias_absmax", "moe_bias_absmax.layer1"}) {
      const auto x = series(a, metric), y = series(b, metric);
      ASSERT_FALSE(x.empty()) << a << " reports no " << metric;
      ASSERT_EQ(x.size(), y.size()) << b << " " << metric;
      double worst = 0;
      for (const auto& [step, v] : x)
        worst = std::max(worst, std::fabs(v - y.at(step)) / std::max(std::fabs(v), 1e-30));
      std::printf("%s vs %s %s: max relative difference %.3g\n", a.c_str(), b.c_str(), metric, worst);
      EXPECT_LT(worst, tolerance) << a << " vs " << b << " " << metric;
    }
  }
  std::vector<float> bias(const std::string& run_dir, int64_t step) {
    const SafetensorsFile f =
        SafetensorsFile::open(dir_ / run_dir / "checkpoints" / checkpoint_dir_name(step) / "model.safetensors");
    const SafetensorsTensor& t = f.at("model.layers.1.mlp.gate.e_score_correction_bias");
    std::vector<float> v(static_cast<size_t>(t.numel()));
    safetensors_to_f32(t, v);
    return v;
  }
};

TEST_F(MoeRouterParallel, EveryLayoutFollowsTheSingleProcessRun) {
  struct Layout {
    const char* name;
    int ranks;
    const char* sets;
  };
  const Layout layouts[] = {
      {"tp2", 2, "--set parallel.tensor=2"},
      {"dp2", 2, "--set parallel.data=2"},
      {"ep2", 2, "--set parallel.data=2 --set parallel.expert=2"},
      {"pp2", 2, "--set parallel.pipeline=2"},
      {"tp2ep2", 4, "--set parallel.tensor=2 --set parallel.data=2 --set parallel.expert=2"},
  };
  const fs::path cfg = config(mpitest::kOptimizers[0], 10);
  Result r = launch(cfg, "one", 1, "");
  ASSERT_EQ(r.status, 0) << r.output;
  // The bias moved: 0.01 a step, 10 steps.
  const auto moved = series("one", "moe_bias_absmax");
  ASSERT_EQ(moved.size(), 10u);
  EXPECT_GT(moved.at(10), 0.015);
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    r = launch(cfg, l.name, l.ranks, l.sets);
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_trajectory("one", l.name, 10);
    expect_same_routing("one", l.name, mpitest::kLossTolerance);
    fs::remove_all(dir_ / l.name);
  }
}

TEST_F(MoeRouterParallel, ResumesBitwiseWithItsBiasAndReshardsFromExpertParallel) {
  const fs::path cfg = config(mpitest::kOptimizers[1], 12);  // Muon
  const std::string every = " --set train.checkpoint_every=6 --set train.eval_every=6";
  ASSERT_EQ(launch(cfg, "straight", 1, every).status, 0);
  // One process, stopped at step 6 and resumed: the same numbers to the bit.
  Result r = launch(cfg, "resumed", 1, every + " --set train.steps=6");
  ASSERT_EQ(r.status, 0) << r.output;
  r = launch(cfg, "resumed", 1, every);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  for (const char* metric : {"train_loss", "moe_aux_loss", "moe_bias_absmax"}) {
    const auto a = series("straight", metric), b = series("resumed", metric);
    ASSERT_EQ(a.size(), 12u) << metric;
    ASSERT_EQ(b.size(), 12u) << metric;
    for (const auto& [step, v] : a) EXPECT_EQ(v, b.at(step)) << metric << " at step " << step;
  }
  EXPECT_EQ(bias("straight", 12), bias("resumed", 12));
  const std::vector<float> b6 = bias("straight", 6);
  float largest = 0;
  for (float v : b6) largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, 0.0f) << "the checkpoint's bias never moved";

  // Expert-parallel ranks each move their copy of the bias alike; the checkpoint resumes on one rank.
  r = launch(cfg, "ep2_one", 2, "--set parallel.data=2 --set parallel.expert=2" + every + " --set train.steps=6");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bias("ep2_one", 6), b6);
  r = launch(cfg, "ep2_one", 1, every);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("straight", "ep2_one", 12);
}

}  // namespace
}  // namespace precon::worker
