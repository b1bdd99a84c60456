// Pipeline parallelism against the single-process run: precon-train under `mpirun -np N` with
// parallel.pipeline stages (1F1B, point-to-point activations, one optimizer per stage, the tied
// embedding on the first and the last stage) must follow the trajectory one process follows, for
// every optimizer, at PP=2, PP=2×TP=2 and PP=2×DP=2, and at PP=4 and an uneven split on four
// layers; checkpoints written at one layout resume at the other (PP2 -> PP1, PP1 -> PP2,
// PP2×DP2 -> PP1); a killed stage ends the job and a signal to one stage checkpoints every stage
// at one step; each stage holds only its own parameters (memory divided by the stages).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <unistd.h>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using mpitest::kLossTolerance;
using mpitest::kOptimizers;
using mpitest::Result;

// Four micro-batches of two sequences (batch 8): every 1F1B phase (warm-up, steady, cool-down)
// runs on two stages. The tolerance is the data-parallel one (mpi_run_fixture.h): a stage
// computes its blocks exactly as one process does, and only the gradient sums (tied embedding,
// data-parallel replicas) and the norm over stages change the order of additions; measured
// differences are ≤ 2e-8 (AdamW, Muon) and ≤ 2e-6 (Shampoo, whose roots amplify them).
constexpr const char* kMicro = "--set train.micro_batch_size=2";

// Ten steps each: the 4-rank runs are oversubscribed on two cores.
class Pipeline : public mpitest::MpiRunFixture {};

TEST_F(Pipeline, TwoStagesFollowTheSingleProcessRunForEveryOptimizerAlsoWithTensorOrDataParallelism) {
  for (const char* opt : kOptimizers) {
    SCOPED_TRACE(opt);
    const fs::path cfg = config(opt, 10);
    Result r = run(trainer(cfg, "one", kMicro));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(mpirun(2) + trainer(cfg, "pp2", std::string(kMicro) + " --set parallel.pipeline=2"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 2 pipeline stage(s) "
                            "(this one: blocks 1 to 1), 4 micro-batch(es) of 2 sequence(s)"),
              std::string::npos)
        << r.output;
    expect_same_trajectory("one", "pp2", 10);
    // Tensor parallelism is the fastest index, the pipeline the slowest: ranks 0, 1 are stage 0.
    r = run(mpirun(4) + trainer(cfg, "pp2tp2", std::string(kMicro) + " --set parallel.pipeline=2 --set parallel.tensor=2"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1: layout: 1 data-parallel rank(s) over mpi, 2 tensor-parallel, 2 pipeline stage(s) "
                            "(this one: blocks 0 to 0)"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("rank 2: layout: 1 data-parallel rank(s) over mpi, 2 tensor-parallel, 2 pipeline stage(s) "
                            "(this one: blocks 1 to 1)"),
              std::string::npos)
        << r.output;
    expect_same_trajectory("one", "pp2tp2", 10);
    r = run(mpirun(4) + trainer(cfg, "pp2dp2", "--set train.micro_batch_size=1 --set parallel.pipeline=2 --set parallel.data=2"));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("rank 3: gradients: this stage's data-parallel sums run bucket by bucket during its last "
                            "micro-batch's backward"),
              std::string::npos)
        << r.output;
    expect_same_trajectory("one", "pp2dp2", 10);
    if (std::string(opt).find("muon") != std::string::npos) {
      // A stage's Newton–Schulz work is shared by its two data-parallel ranks: 2 matrices each.
      EXPECT_NE(r.output.find("rank 3: routing: muon: 4 tensors"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("muon: rank 1 orthogonalises 2 of 4 matrices"), std::string::npos) << r.output;
    }
    for (const char* d : {"one", "pp2", "pp2tp2", "pp2dp2"}) fs::remove_all(dir_ / d);
  }
}

TEST_F(Pipeline, FourStagesAndAnUnevenSplitOfFourLayersFollowTheSingleProcessRun) {
  const fs::path cfg = config(kOptimizers[1], 10);
  const std::string four = std::string(kMicro) + " --set model.n_layer=4";
  ASSERT_EQ(run(trainer(cfg, "one", four)).status, 0);
  Result r = run(mpirun(4) + trainer(cfg, "pp4", four + " --set parallel.pipeline=4"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 3: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 4 pipeline stage(s) "
                          "(this one: blocks 3 to 3)"),
            std::string::npos)
      << r.output;
  expect_same_trajectory("one", "pp4", 10);
  r = run(mpirun(2) + trainer(cfg, "uneven", four + " --set parallel.pipeline=2 --set 'parallel.pipeline_layers=[3, 1]'"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 2 pipeline stage(s) "
                          "(this one: blocks 0 to 2)"),
            std::string::npos)
      << r.output;
  expect_same_trajectory("one", "uneven", 10);
}

TEST_F(Pipeline, CheckpointsOfTwoStagesResumeInOneProcessAndTheOtherWay) {
  // Shampoo: the most state (factors, roots, grafting, failure counters) split over the stages,
  // and over the owners within a stage.
  // Validation at 5 and 10 in every run, so that the interrupted ones have the same records.
  const fs::path cfg = config(kOptimizers[2], 10);
  const std::string pp1 = std::string(kMicro) + " --set train.eval_every=5", pp2 = pp1 + " --set parallel.pipeline=2";
  ASSERT_EQ(run(trainer(cfg, "straight", pp1)).status, 0);
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "pp2_pp1", pp2 + " --set train.steps=5")).status, 0);
  Result r = run(trainer(cfg, "pp2_pp1", pp1));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("straight", "pp2_pp1", 10);
  ASSERT_EQ(run(trainer(cfg, "pp1_pp2", pp1 + " --set train.steps=5")).status, 0);
  r = run(mpirun(2) + trainer(cfg, "pp1_pp2", pp2));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("straight", "pp1_pp2", 10);
  // PP2×DP2 -> PP1: within each stage the blocks' state lies with their owners, who write it.
  ASSERT_EQ(run(mpirun(4) + trainer(cfg, "pp2dp2_pp1", "--set train.eval_every=5 --set train.micro_batch_size=1 "
                                                       "--set parallel.pipeline=2 --set parallel.data=2 --set train.steps=5"))
                .status,
            0);
  r = run(trainer(cfg, "pp2dp2_pp1", pp1));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_trajectory("straight", "pp2dp2_pp1", 10);
}

TEST_F(Pipeline, EachStageHoldsOnlyItsOwnParametersAndResumesAtTheSameLayout) {
  // The fixture's model (n_layer 2, d_model 32, seq_len 16, vocab 61 padded to 64), by hand:
  // wte 64·32 = 2048, wpe 16·32 = 512, a block 12704 (ln_1 64, c_attn 3072 + 96, attn.c_proj
  // 1024 + 32, ln_2 64, c_fc 4096 + 128, mlp.c_proj 4096 + 32), ln_f 64: 28032 in all. Stage 0
  // holds wte, wpe and block 0 (15264); stage 1 block 1, ln_f and the tied wte (14816).
  const fs::path cfg = config(kOptimizers[0], 10);
  const std::string pp1 = std::string(kMicro) + " --set train.eval_every=5", pp2 = pp1 + " --set parallel.pipeline=2";
  ASSERT_EQ(run(trainer(cfg, "straight", pp1)).status, 0);
  Result r = run(mpirun(2) + trainer(cfg, "pp2", pp2 + " --set train.steps=5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: parameters: 15264 of the model's 28032 held on this rank (pipeline stage 0)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 1: parameters: 14816 of the model's 28032 held on this rank (pipeline stage 1)"),
            std::string::npos)
      << r.output;
  // The last stage's tied-embedding moments come back by name from the first stage's shard.
  r = run(mpirun(2) + trainer(cfg, "pp2", pp2));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: resumed from"), std::string::npos) << r.output;
  expect_same_trajectory("straight", "pp2", 10);
}

TEST_F(Pipeline, ALayoutThePipelineCannotTakeIsAConfigError) {
  const fs::path cfg = config(kOptimizers[0]);
  struct Case {
    std::string sets, message;
  };
  const Case cases[] = {
      {"--set parallel.pipeline=3", "pipeline = 3 stages need at least as many layers, model.n_layer = 2"},
      {"--set parallel.pipeline=2 --set 'parallel.pipeline_layers=[1, 2]'",
       "pipeline_layers sum to 3 layers, model.n_layer = 2"},
      {"--set 'parallel.pipeline_layers=[2]' --set parallel.pipeline=2", "pipeline_layers lists 1 stage(s), parallel.pipeline = 2"},
      {"--set parallel.virtual_stages=2", "virtual_stages = 2 interleaves pipeline stages; it needs parallel.pipeline ≥ 2"},
      {"--set parallel.pipeline=2 --set parallel.virtual_stages=2",
       "pipeline × virtual_stages = 2 × 2 chunks need at least as many layers, model.n_layer = 2"},
      {"--set model.n_layer=4 --set parallel.pipeline=2 --set parallel.virtual_stages=2 --set train.micro_batch_size=8",
       "virtual_stages > 1 needs the micro-batches a step (batch_size / (data × micro_batch_size) = 1) to be a multiple "
       "of parallel.pipeline = 2"},
      {"--set model.n_layer=4 --set parallel.pipeline=2 --set parallel.virtual_stages=2 "
       "--set 'parallel.pipeline_layers=[3, 1]'",
       "pipeline_layers lists 2 stage(s), parallel.pipeline = 2 × virtual_stages = 2"},
      // A Slurm trial's tasks are held to every factor of the layout.
      {"--set parallel.pipeline=2 --set resources.executor=slurm --set resources.ntasks_per_node=1",
       "resources.nodes × ntasks_per_node = 1 × 1 tasks, but the layout parallel.tensor × parallel.data × "
       "parallel.pipeline needs 2 rank(s)"},
  };
  for (const Case& c : cases) {
    Result r = run(trainer(cfg, "bad", c.sets));
    EXPECT_EQ(r.status, 2) << c.sets << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.sets << "\n" << r.output;
  }
  Result r = run(mpirun(2) + trainer(cfg, "bad", "--set parallel.pipeline=2 --set parallel.data=2"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.tensor × parallel.data × parallel.pipeline = 1 × 2 × 2 needs 4 rank(s), but the "
                          "launcher started 2"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "metrics.jsonl"));
}

// A job run on a thread of its own while the test acts on its ranks.
class RunningPipeline {
 public:
  explicit RunningPipeline(const std::string& cmd) : job_([this, cmd] { result_ = test::run_command(cmd); }) {}
  ~RunningPipeline() {
    if (job_.joinable()) job_.join();
  }
  Result finish() {
    job_.join();
    return result_;
  }

 private:
  Result result_;
  std::thread job_;
};

TEST_F(Pipeline, AKilledStageEndsTheJobInSeconds) {
  const fs::path cfg = config(kOptimizers[0], 100000);
  const fs::path pids = dir_ / "pids";
  fs::create_directories(pids);
  // Stage 1 dies while stage 0 waits for its gradients (or sends it activations).
  const std::string cmd = mpirun(2) + "sh -c 'echo $$ > " + pids.string() + "/$OMPI_COMM_WORLD_RANK; exec " +
                          trainer(cfg, "killed", std::string(kMicro) + " --set parallel.pipeline=2") + "'";
  RunningPipeline job(cmd);
  for (int i = 0; i < 300 && !fs::exists(dir_ / "killed" / "metrics.jsonl"); ++i) std::this_thread::sleep_for(50ms);
  pid_t pid = 0;
  std::ifstream(pids / "1") >> pid;
  ASSERT_GT(pid, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGKILL);
  const Result r = job.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("killed stage 1: the job ended %.2f s later with status %d\n", seconds, r.status);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}

TEST_F(Pipeline, ASignalToTheLastStageCheckpointsEveryStageAtOneStep) {
  const fs::path cfg = config(kOptimizers[1], 100000);
  const fs::path pids = dir_ / "pids";
  fs::create_directories(pids);
  const std::string cmd = mpirun(2) + "sh -c 'echo $$ > " + pids.string() + "/$OMPI_COMM_WORLD_RANK; exec " +
                          trainer(cfg, "signalled",
                                  std::string(kMicro) + " --set parallel.pipeline=2 --set train.checkpoint_every=0") +
                          "'";
  RunningPipeline job(cmd);
  for (int i = 0; i < 300 && !fs::exists(dir_ / "signalled" / "metrics.jsonl"); ++i) std::this_thread::sleep_for(50ms);
  pid_t pid = 0;
  std::ifstream(pids / "1") >> pid;
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGUSR1);  // the last stage only: the first learns it from the per-step agreement
  const Result r = job.finish();
  EXPECT_EQ(r.status, 75) << r.output;
  auto step_of = [&](const std::string& who) {
    const std::string marker = who + ": signal received: checkpointed at step ";
    const size_t at = r.output.find(marker);
    return at == std::string::npos ? -1 : std::atoi(r.output.c_str() + at + marker.size());
  };
  const int step = step_of("rank 0");
  ASSERT_GT(step, 0) << r.output;
  EXPECT_EQ(step, step_of("rank 1")) << r.output;
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "signalled" / "checkpoints")) checkpoints += e.is_directory();
  EXPECT_EQ(checkpoints, 1);
  // The checkpoint holds both stages: one process resumes it and trains on from that step.
  Result resumed = run(trainer(cfg, "signalled", std::string(kMicro) + " --set train.steps=" + std::to_string(step + 2)));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
}

}  // namespace
}  // namespace precon::worker
