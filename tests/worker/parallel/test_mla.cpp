// Multi-head latent attention ([model.mla]) under tensor parallelism against its single-process
// run: precon-train under `mpirun -np 2` at TP=2 (q_b or q_proj and kv_b split by heads, o_proj by
// its input heads, the latent projections and their norms replicated, the shared RoPE key's
// gradient summed over the ranks) follows the trajectory one process follows, with a query latent
// (AdamW and Muon, whose replicated latent matrices are orthogonalised whole on every rank; Muon
// split by heads, whose q_b, kv_b and o_proj heads each lie on one rank, under tp_mode duplicated and
// distributed) and with a plain q_proj; and QK-clip, each rank clipping its own heads' q_nope, q_rope
// and k_nope rows from the logits of every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

// Four heads of 8 + 4 query/key channels and 16 value channels (wider than the query heads).
const std::string kMla =
    "--set model.arch=llama --set model.n_head=4 --set model.ffn_hidden=48 --set model.mla.kv_lora_rank=16 "
    "--set model.mla.qk_nope_head_dim=8 --set model.mla.qk_rope_head_dim=4 --set model.mla.v_head_dim=16 "
    "--set train.micro_batch_size=2 ";

class MlaParallel : public mpitest::MpiRunFixture {
 protected:
  Result launch(const fs::path& cfg, const std::string& name, int ranks, const std::string& sets) {
    return run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, name, kMla + sets));
  }
};

TEST_F(MlaParallel, TensorParallelFollowsTheSingleProcessRun) {
  struct Case {
    const char* name;
    const char* optimizer;
    const char* sets;
  };
  const Case cases[] = {
      {"q_lora_adamw", mpitest::kOptimizers[0], "--set model.mla.q_lora_rank=12 "},
      {"q_lora_muon", mpitest::kOptimizers[1], "--set model.mla.q_lora_rank=12 "},
      {"q_proj_adamw", mpitest::kOptimizers[0], ""},
      {"q_lora_muon_split", mpitest::kOptimizers[1], "--set model.mla.q_lora_rank=12 --set optimizer.muon.split_heads=true "},
      {"q_proj_muon_split_distributed", mpitest::kOptimizers[1],
       "--set optimizer.muon.split_heads=true --set optimizer.muon.tp_mode=distributed "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path cfg = config(c.optimizer, 8);
    const std::string one = std::string(c.name) + "_one", tp2 = std::string(c.name) + "_tp2";
    Result r = launch(cfg, one, 1, c.sets);
    ASSERT_EQ(r.status, 0) << r.output;
    r = launch(cfg, tp2, 2, std::string(c.sets) + "--set parallel.tensor=2");
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_trajectory(one, tp2, 8);
  }
}

// QK-clip on MLA at TP=2: the same losses, the same heads clipped each step and the same largest
// logit (within the rounding of fp32 sums taken in another order) as one process. This small
// model's largest logit grows from 0.034 (q_lora) and 0.042 (q_proj) at the first step to 0.07..0.09
// at the eighth: a threshold of 0.04 clips 1 head at the first or third step and 7 or 8 of the 8 by
// the last.
TEST_F(MlaParallel, QkClipFollowsTheSingleProcessRun) {
  const fs::path cfg = config("[optimizer]\nname = \"adamw\"\nlr = 0.02\nqk_clip_threshold = 0.04\n", 8);
  for (const char* sets : {"--set model.mla.q_lora_rank=12 ", ""}) {
    SCOPED_TRACE(sets);
    Result r = launch(cfg, "one", 1, sets);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto clipped = series("one", "qk_clipped_heads");
    double total = 0;
    for (const auto& [step, n] : clipped) total += n;
    EXPECT_GT(total, 0) << "the threshold did not bite";
    r = launch(cfg, "tp2", 2, std::string(sets) + "--set parallel.tensor=2");
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_trajectory("one", "tp2", 8);
    EXPECT_EQ(series("tp2", "qk_clipped_heads"), clipped);
    const auto a = series("one", "max_attention_logit"), b = series("tp2", "max_attention_logit");
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [step, v] : a) EXPECT_NEAR(b.at(step), v, 2e-4 * std::fabs(v)) << "step " << step;
    std::printf("MLA QK-clip (%s): %.0f heads clipped over 8 steps, the same at TP=2\n",
                sets[0] ? "q_lora" : "q_proj", total);
    fs::remove_all(dir_ / "one");
    fs::remove_all(dir_ / "tp2");
  }
}

}  // namespace
}  // namespace precon::worker
