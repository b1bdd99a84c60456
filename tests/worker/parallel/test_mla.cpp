// Multi-head latent attention ([model.mla]) under tensor parallelism against its single-process
// run: precon-train under `mpirun -np 2` at TP=2 (q_b or q_proj and kv_b split by heads, o_proj by
// its input heads, the latent projections and their norms replicated, the shared RoPE key's
// gradient summed over the ranks) follows the trajectory one process follows, with a query latent
// (AdamW and Muon, whose replicated latent matrices are orthogonalised whole on every rank) and
// with a plain q_proj.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace precon::worker
