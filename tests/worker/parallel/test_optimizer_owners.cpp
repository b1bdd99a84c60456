// The distributed optimizers in the trainer: Muon's gradients reduced to their owners (values,
// norm, bytes against AdamW's), its tensor-parallel modes and all-gather dtype,
// Shampoo's owned blocks, optimizer state written in shards by its owners and read back at
// another layout, and the replica checksum after a load.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
class ParallelOptim : public mpitest::MpiRunFixture {};
using mpitest::Result;
const char* const kMuon = mpitest::kOptimizers[1];
const char* const kShampoo = mpitest::kOptimizers[2];

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST_F(ParallelOptim, MuonTensorParallelModesMatchTheirReferences) {
  // One optimizer step in each mode on two ranks (tests/worker/parallel/muon_tp_check.cpp).
  Result r = run(mpirun(2) + PRECON_MUON_TP_CHECK);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("all muon tp_mode checks passed on 2 ranks"), std::string::npos) << r.output;
}

TEST_F(ParallelOptim, MuonDistributedTensorParallelFollowsTheSingleProcessRunAndReshards) {
  // tp_mode = distributed: every rank of the owning tensor-parallel group keeps the momentum of its
  // own shard only and orthogonalises it with the Gram matrix all-reduced; the trajectory is the
  // single process's. The checkpoint holds each momentum as the ranks' parts (the fused QKV as
  // three chunks a rank); it resumes in one process (TP2 -> TP1), and a one-process checkpoint
  // resumes at TP2 (TP1 -> TP2), both on the same trajectory.
  const fs::path cfg = config(kMuon);
  const std::string dist = "--set parallel.tensor=2 --set optimizer.muon.tp_mode=distributed";
  ASSERT_EQ(run(trainer(cfg, "one")).status, 0);
  Result r = run(mpirun(2) + trainer(cfg, "dist", dist));
  ASSERT_EQ(r.status, 0) << r.output;
  // d_model 32, 2 layers: c_attn 32x96, attn.c_proj 32x32, c_fc 32x128, mlp.c_proj 128x32 each.
  for (const char* rank : {"0", "1"})
    EXPECT_NE(r.output.find(std::string("muon: rank ") + rank +
                            " orthogonalises 8 of 8 matrices (tp_mode distributed) and keeps 12288 momentum values of their 24576"),
              std::string::npos) << r.output;
  expect_same_trajectory("one", "dist", 20);
  const nlohmann::json index = read_json(dir_ / "dist" / "checkpoints" / "step_00000020" / "optimizer.json");
  std::map<std::string, std::vector<nlohmann::json>> momenta;
  for (const auto& e : index["entries"])
    if (e["name"].get<std::string>().find(".momentum") != std::string::npos) momenta[e["name"]].push_back(e);
  ASSERT_EQ(momenta.size(), 8u);
  for (const auto& [name, parts] : momenta) {
    const bool qkv = name.find("c_attn") != std::string::npos;
    EXPECT_EQ(parts.size(), qkv ? 6u : 2u) << name;  // three chunks on each of two ranks, or one
    int64_t values = 0, whole = 1;
    for (const auto& e : parts) {
      EXPECT_NE(e["shape"], e["global_shape"]) << e;
      values += e["shape"][0].get<int64_t>() * e["shape"][1].get<int64_t>();
    }
    for (const auto& d : parts[0]["global_shape"]) whole *= d.get<int64_t>();
    EXPECT_EQ(values, whole) << name << ": the parts tile the tensor";
  }
  r = run(mpirun(2) + trainer(cfg, "resharded", dist + " --set train.steps=10"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(trainer(cfg, "resharded"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("one", "resharded", 20);
  ASSERT_EQ(run(trainer(cfg, "grown", "--set train.steps=10")).status, 0);
  r = run(mpirun(2) + trainer(cfg, "grown", dist));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("one", "grown", 20);
}

TEST_F(ParallelOptim, OptimizerStateIsWrittenOnceByItsOwners) {
  // DP=2 Muon: each matrix's momentum lies in its owner's shard only, AdamW's state (replicated,
  // without the distributed optimizer) in the first rank's; optimizer.json names every entry once
  // with its file, global shape and offset.
  const fs::path cfg = config(kMuon, 10);
  Result r = run(mpirun(2) + trainer(cfg, "dp2", "--set parallel.data=2 --set parallel.distributed_optimizer=false"));
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path ckpt = dir_ / "dp2" / "checkpoints" / "step_00000010";
  const nlohmann::json index = read_json(ckpt / "optimizer.json");
  std::set<std::string> names, files;
  int momenta[2] = {0, 0};
  for (const auto& e : index["entries"]) {
    EXPECT_TRUE(names.insert(e["name"].get<std::string>()).second) << e;
    files.insert(e["file"].get<std::string>());
    EXPECT_EQ(e["global_shape"], e["shape"]) << e;
    EXPECT_EQ(e["offset"], nlohmann::json(std::vector<int>(e["shape"].size(), 0))) << e;
    const std::string name = e["name"];
    if (name.size() > 9 && name.substr(name.size() - 9) == ".momentum")
      ++momenta[e["file"] == "optimizer-00001-of-00002.safetensors"];
    if (name.find("exp_avg") != std::string::npos) {
      EXPECT_EQ(e["file"], "optimizer-00000-of-00002.safetensors") << e;
    }
  }
  EXPECT_EQ(files, (std::set<std::string>{"optimizer-00000-of-00002.safetensors", "optimizer-00001-of-00002.safetensors"}));
  EXPECT_EQ(momenta[0], 4);  // 8 matrices, 4 owned by each rank
  EXPECT_EQ(momenta[1], 4);
  const nlohmann::json manifest = read_json(ckpt / "manifest.json");
  for (const auto& f : manifest["files"]) files.erase(f["name"].get<std::string>());
  EXPECT_TRUE(files.empty()) << "every shard is in the manifest";
}

TEST_F(ParallelOptim, MuonUpdatesGatheredInBf16HalveTheBytesAndStayClose) {
  // AdamW's moments replicated: its all-gather (fp32 whatever Muon's dtype) would add to both.
  const fs::path cfg = config(kMuon, 20);
  const std::string sets = "--set parallel.data=2 --set train.log_every=1 --set parallel.distributed_optimizer=false";
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "fp32", sets)).status, 0);
  Result r = run(mpirun(2) + trainer(cfg, "bf16", sets + " --set optimizer.muon.comm_dtype=bf16"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto fp32 = series("fp32", "optim_comm_bytes"), bf16 = series("bf16", "optim_comm_bytes");
  ASSERT_FALSE(fp32.empty());
  EXPECT_GT(fp32.begin()->second, 0);
  EXPECT_EQ(bf16.begin()->second * 2, fp32.begin()->second);
  // bf16 keeps 8 bits of mantissa: the updates differ by ~0.4 %, the loss by far less after 20
  // steps (measured ~1e-4 relative); a lost or misplaced update would move it by 1e-2.
  expect_same_trajectory("fp32", "bf16", 20, 3e-3);
}

TEST_F(ParallelOptim, GradientsReducedToTheirRootsMatchTheOneProcessSums) {
  // GradientSync with roots on three ranks (tests/worker/parallel/grad_sync_check.cpp): the root's sum,
  // zeros elsewhere, the norm counting each gradient once, the bytes each rank sends.
  Result r = run(mpirun(3) + PRECON_GRAD_SYNC_CHECK);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("all gradient sync checks passed on 3 ranks"), std::string::npos) << r.output;
}

TEST_F(ParallelOptim, MuonWithGradientsReducedToOwnersFollowsTheSingleProcessRun) {
  // DP=2 fp32 Muon: each matrix's gradient is summed on its owner only. The loss and the clipped
  // global norm (train.grad_clip 1 clips every step here) follow the single process; so do
  // TP2×DP2 duplicated (one owner among four ranks), distributed (the matrices stay all-reduced)
  // and blockwise (against TP2 alone, whose gradients are all-reduced: it depends on the TP layout).
  // AdamW's moments replicated (parallel.distributed_optimizer = false) so that only the matrices
  // have roots; test_distributed_optimizer.cpp shows the sharded run is this one bit for bit.
  const fs::path cfg = config(kMuon);
  const std::string log1 = " --set train.log_every=1 --set parallel.distributed_optimizer=false";
  ASSERT_EQ(run(trainer(cfg, "one", log1)).status, 0);
  Result r = run(mpirun(2) + trainer(cfg, "dp2", "--set parallel.data=2" + log1));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: gradients: 8 of 28 tensors reduced to the one rank that reads them"),
            std::string::npos) << r.output;
  auto same_norms = [&](const std::string& a, const std::string& b) {
    const auto x = series(a, "grad_norm"), y = series(b, "grad_norm");
    ASSERT_EQ(x.size(), 20u) << a;
    ASSERT_EQ(y.size(), 20u) << b;
    double worst = 0;
    for (const auto& [step, v] : x) worst = std::max(worst, std::fabs(v - y.at(step)) / v);
    std::printf("%s vs %s grad_norm: max relative difference %.3g\n", a.c_str(), b.c_str(), worst);
    EXPECT_LT(worst, mpitest::kLossTolerance) << a << " vs " << b;
  };
  expect_same_trajectory("one", "dp2", 20);
  same_norms("one", "dp2");
  const std::string tp2dp2 = "--set parallel.tensor=2 --set parallel.data=2" + log1;
  for (const char* mode : {"duplicated", "distributed"}) {
    SCOPED_TRACE(mode);
    r = run(mpirun(4) + trainer(cfg, mode, tp2dp2 + " --set optimizer.muon.tp_mode=" + mode));
    ASSERT_EQ(r.status, 0) << r.output;
    // Each rank's part of a matrix is summed at the matrix's owning data index only, in every mode.
    EXPECT_NE(r.output.find("rank 0: gradients: 8 of 28 tensors reduced"), std::string::npos) << r.output;
    expect_same_trajectory("one", mode, 20);
    same_norms("one", mode);
  }
  const std::string blockwise = " --set optimizer.muon.tp_mode=blockwise";
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "tp2_blockwise", "--set parallel.tensor=2" + log1 + blockwise)).status, 0);
  r = run(mpirun(4) + trainer(cfg, "tp2dp2_blockwise", tp2dp2 + blockwise));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: gradients: 8 of 28 tensors reduced"), std::string::npos) << r.output;
  expect_same_trajectory("tp2_blockwise", "tp2dp2_blockwise", 20);
  same_norms("tp2_blockwise", "tp2dp2_blockwise");
}

TEST_F(ParallelOptim, MuonFp32SendsAtMostAQuarterMoreBytesThanAdamW) {
  // Moonlight's bound at DP=2 on the same model: the gradient sums plus the optimizer's
  // all-gathers per step and rank (comm_bytes + optim_comm_bytes, the busiest rank's each). An
  // all-reduce of every gradient plus the all-gather of the updates would be ~1.44x here.
  auto bytes = [&](const std::string& run_dir) {
    const auto grad = series(run_dir, "comm_bytes"), optim = series(run_dir, "optim_comm_bytes");
    EXPECT_EQ(grad.size(), 20u) << run_dir;
    return grad.empty() ? 0.0 : grad.rbegin()->second + optim.at(grad.rbegin()->first);
  };
  const std::string sets = "--set parallel.data=2 --set train.log_every=1";
  ASSERT_EQ(run(mpirun(2) + trainer(config(mpitest::kOptimizers[0]), "adamw", sets)).status, 0);
  ASSERT_EQ(run(mpirun(2) + trainer(config(kMuon), "muon", sets + " --set optimizer.muon.comm_dtype=fp32")).status, 0);
  const double adamw = bytes("adamw"), muon = bytes("muon");
  std::printf("bytes per step: adamw %.0f, muon fp32 %.0f (%.3fx)\n", adamw, muon, muon / adamw);
  ASSERT_GT(adamw, 0);
  EXPECT_LE(muon, 1.25 * adamw);
}

TEST_F(ParallelOptim, ShampooTensorParallelFollowsTheSingleProcessRunAndReshards) {
  // Blocks owned over all ranks of TP=2, directions all-gathered; TP2 -> TP1 resumes on the trajectory.
  const fs::path cfg = config(kShampoo);
  ASSERT_EQ(run(trainer(cfg, "one")).status, 0);
  Result r = run(mpirun(2) + trainer(cfg, "tp2", "--set parallel.tensor=2 --set train.steps=10"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(trainer(cfg, "tp2"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("one", "tp2", 20);
}

TEST_F(ParallelOptim, APerturbedReplicaIsCaughtAfterTheLoad) {
  const fs::path cfg = config(kShampoo, 20);
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "run", "--set parallel.data=2 --set train.steps=10")).status, 0);
  Result r = run(mpirun(2) + "-x PRECON_FAULT_PERTURB_REPLICA=1 " + trainer(cfg, "run", "--set parallel.data=2"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the parameters of rank(s) 1 differ from rank 0's"), std::string::npos) << r.output;
  // Unperturbed, the same resume goes on.
  r = run(mpirun(2) + trainer(cfg, "run", "--set parallel.data=2"));
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace precon::worker
