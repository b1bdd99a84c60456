// parallel.distributed_optimizer: AdamW's moments (of an AdamW run, and of a Muon run's
// AdamW-routed parameters) split in contiguous ranges over the data-parallel ranks. The run is the
// replicated run's bit for bit (losses and weights; the logged norm to double rounding); each rank's state bytes are the range arithmetic's; the checkpoint
// holds every moment once, as boxes that tile it; a run SIGKILLed after a checkpoint resumes
// bitwise at the same data-parallel size and on the same trajectory at DP1 and DP4.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

class DistributedOptimizer : public mpitest::MpiRunFixture {
 protected:
  // The fixture's GPT-2 (d_model 32, 2 layers, seq_len 16, vocab 61) counted by hand: wte 61·32,
  // wpe 16·32, per layer ln_1 64, c_attn 32·96 + 96, attn.c_proj 32·32 + 32, ln_2 64,
  // c_fc 32·128 + 128, mlp.c_proj 128·32 + 32; ln_f 64.
  static constexpr int64_t kLayer = 64 + (3072 + 96) + (1024 + 32) + 64 + (4096 + 128) + (4096 + 32);
  static constexpr int64_t kModel = 1952 + 512 + 2 * kLayer + 64;
  // The values Muon leaves to AdamW: every parameter but the 8 hidden matrices.
  static constexpr int64_t kMuonSide = kModel - 2 * (3072 + 1024 + 4096 + 4096);

  // The first record's value of a metric.
  double first(const std::string& run_dir, const std::string& metric) {
    const auto s = series(run_dir, metric);
    EXPECT_FALSE(s.empty()) << run_dir << " has no " << metric;
    return s.empty() ? -1 : s.begin()->second;
  }
  static std::string file_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(DistributedOptimizer, IsTheReplicatedRunBitForBitWithItsStateDivided) {
  for (const char* opt : {mpitest::kOptimizers[0], mpitest::kOptimizers[1]}) {
    const bool adamw = opt == mpitest::kOptimizers[0];
    SCOPED_TRACE(adamw ? "adamw" : "muon");
    const fs::path cfg = config(opt, 12);
    const std::string sets = " --set parallel.data=2 --set train.log_every=1";
    Result r = run(mpirun(2) + trainer(cfg, "replicated", sets + " --set parallel.distributed_optimizer=false"));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(mpirun(2) + trainer(cfg, "sharded", sets));
    ASSERT_EQ(r.status, 0) << r.output;
    for (const char* metric : {"train_loss", "val_loss"})
      EXPECT_EQ(series("sharded", metric), series("replicated", metric)) << metric;
    // The global norm adds the same squares in another order (each range's rows on its rank, then
    // across the two): equal up to double rounding. Clipping scales by it in fp32, hence the
    // bitwise losses above.
    const auto norm = series("replicated", "grad_norm");
    ASSERT_EQ(norm.size(), 12u);
    for (const auto& [step, v] : series("sharded", "grad_norm")) EXPECT_NEAR(v, norm.at(step), 1e-12 * v) << step;
    // Two moments of 4 bytes per value: all of them on each rank, or a range of ceil(n / 2).
    const int64_t n = adamw ? kModel : kMuonSide;
    const double matrices = adamw ? 0.0 : first("replicated", "memory_optimizer_bytes") - 8.0 * n;
    EXPECT_GT(matrices + 1, 0) << "the replicated run holds all of AdamW's state";
    EXPECT_EQ(first("sharded", "memory_optimizer_bytes") - matrices, 8.0 * ((n + 1) / 2));
    // The updated values' all-gather: each rank sends its range once a step.
    EXPECT_EQ(first("sharded", "optim_comm_bytes") - first("replicated", "optim_comm_bytes"), 4.0 * ((n + 1) / 2));
    const auto peak = series("sharded", "memory_peak_bytes");
    ASSERT_FALSE(peak.empty());
    EXPECT_GT(peak.rbegin()->second, 1e6) << "VmHWM of a trainer is megabytes";
    EXPECT_EQ(file_bytes(dir_ / "sharded" / "checkpoints" / "step_00000012" / "model.safetensors"),
              file_bytes(dir_ / "replicated" / "checkpoints" / "step_00000012" / "model.safetensors"));
    // Each moment once, as boxes of its parameter's shape that tile it between the two files.
    std::ifstream in(dir_ / "sharded" / "checkpoints" / "step_00000012" / "optimizer.json");
    const nlohmann::json index = nlohmann::json::parse(in);
    std::map<std::string, int64_t> values, whole;
    std::map<std::string, std::set<std::string>> files;
    for (const auto& e : index["entries"]) {
      const std::string name = e["name"];
      if (name.find(".exp_avg") == std::string::npos) continue;
      int64_t v = 1, w = 1;
      for (const auto& d : e["shape"]) v *= d.get<int64_t>();
      for (const auto& d : e["global_shape"]) w *= d.get<int64_t>();
      values[name] += v;
      whole[name] = w;
      files[name].insert(e["file"].get<std::string>());
    }
    int64_t total = 0, split = 0;
    for (const auto& [name, v] : values) {
      EXPECT_EQ(v, whole[name]) << name;
      total += v;
      split += files[name].size() > 1;
    }
    EXPECT_EQ(total, 2 * n);
    EXPECT_GE(split, 2) << "the ranges' boundary cuts one parameter's two moments";
    fs::remove_all(dir_ / "replicated");
    fs::remove_all(dir_ / "sharded");
  }
}

TEST_F(DistributedOptimizer, ResumesAfterSigkillBitwiseAndReshardsToOtherDataParallelSizes) {
  const fs::path cfg = config(mpitest::kOptimizers[0], 12);
  const std::string every = " --set train.checkpoint_every=6 --set train.eval_every=6 --set parallel.data=";
  Result r = run(mpirun(2) + trainer(cfg, "whole", every + "2"));
  ASSERT_EQ(r.status, 0) << r.output;
  // SIGKILLed after step 9 (its last checkpoint: step 6), resumed at DP2: every loss and the final
  // model bitwise (the resumed ranks start from the checkpoint's model, not a fresh one).
  r = run(mpirun(2) + "env PRECON_FAULT_KILL_AT=step:9 " + trainer(cfg, "killed", every + "2"));
  EXPECT_NE(r.status, 0) << "the fault hook did not kill the run";
  r = run(mpirun(2) + trainer(cfg, "killed", every + "2"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_EQ(series("killed", "train_loss"), series("whole", "train_loss"));
  EXPECT_EQ(series("killed", "val_loss"), series("whole", "val_loss"));
  EXPECT_EQ(file_bytes(dir_ / "killed" / "checkpoints" / "step_00000012" / "model.safetensors"),
            file_bytes(dir_ / "whole" / "checkpoints" / "step_00000012" / "model.safetensors"));
  // The step-6 checkpoint of DP2 resumed at DP1 and at DP4: the same trajectory (the gradient
  // sums' order changes with the ranks).
  for (int ranks : {1, 4}) {
    SCOPED_TRACE(ranks);
    const std::string name = "dp" + std::to_string(ranks);
    fs::create_directories(dir_ / name / "checkpoints");
    fs::copy(dir_ / "whole" / "checkpoints" / "step_00000006", dir_ / name / "checkpoints" / "step_00000006",
             fs::copy_options::recursive);
    r = run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, name, every + std::to_string(ranks)));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    const auto a = series("whole", "train_loss"), b = series(name, "train_loss");
    ASSERT_EQ(b.size(), 6u);
    for (const auto& [step, v] : b) EXPECT_NEAR(v, a.at(step), mpitest::kLossTolerance * v) << step;
  }
}

}  // namespace
}  // namespace precon::worker
