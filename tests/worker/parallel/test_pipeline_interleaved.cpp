// Interleaved pipeline stages against the single-process run: precon-train under `mpirun` with
// parallel.virtual_stages chunks a pipeline rank (virtual stage v·P + p on rank p, Megatron's
// interleaved 1F1B, activations from the last rank back to the first between chunks) must follow
// the trajectory one process follows for every optimizer, also with data or tensor parallelism
// and with an uneven split; a rank holds only its chunks' parameters; checkpoints written
// interleaved resume in one process and at plain 1F1B, and the other way.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/worker/support/mpi_run_fixture.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::kOptimizers;
using mpitest::Result;

// Four layers over 2 ranks × 2 chunks (one block a virtual stage), four micro-batches of two
// sequences (batch 8): every phase of the interleaved schedule (warm-up, steady, cool-down) runs.
// The tolerance is the plain pipeline's (test_pipeline.cpp): only the order of the gradient sums
// changes.
const std::string kFour = "--set model.n_layer=4 --set train.micro_batch_size=2";
const std::string kInterleaved = " --set parallel.pipeline=2 --set parallel.virtual_stages=2";

class InterleavedPipeline : public mpitest::MpiRunFixture {
 protected:
  // Trains `run_dir` on `ranks` ranks (1: started directly): the run must succeed, log each of
  // `says`, and follow the trajectory of `reference` over ten steps.
  void expect_follows(const std::string& reference, int ranks, const fs::path& cfg, const std::string& run_dir,
                      const std::string& sets, const std::vector<std::string>& says = {}) {
    const Result r = run((ranks > 1 ? mpirun(ranks) : std::string()) + trainer(cfg, run_dir, sets));
    ASSERT_EQ(r.status, 0) << r.output;
    for (const std::string& line : says) EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
    expect_same_trajectory(reference, run_dir, 10);
  }
};

TEST_F(InterleavedPipeline, TwoChunksARankFollowTheSingleProcessRunForEveryOptimizer) {
  for (const char* opt : kOptimizers) {
    SCOPED_TRACE(opt);
    const fs::path cfg = config(opt, 10);
    ASSERT_EQ(run(trainer(cfg, "one", kFour)).status, 0);
    // By hand (mpi_run_fixture.h's model at four layers): wte 2048, wpe 512, a block 12704,
    // ln_f 64, 53440 in all. Rank 0 holds wte, wpe, blocks 0 and 2; rank 1 blocks 1 and 3, ln_f
    // and the tied wte.
    expect_follows("one", 2, cfg, "pp2v2", kFour + kInterleaved,
                   {"rank 0: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 2 × 2 virtual pipeline "
                    "stage(s) (this one: blocks 0 to 0, 2 to 2), 4 micro-batch(es) of 2 sequence(s)",
                    "rank 1: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 2 × 2 virtual pipeline "
                    "stage(s) (this one: blocks 1 to 1, 3 to 3)",
                    "rank 0: parameters: 27968 of the model's 53440 held on this rank (pipeline stage 0)",
                    "rank 1: parameters: 27520 of the model's 53440 held on this rank (pipeline stage 1)"});
    for (const char* d : {"one", "pp2v2"}) fs::remove_all(dir_ / d);
  }
}

TEST_F(InterleavedPipeline, WithDataOrTensorParallelismAndUnevenChunksFollowTheSingleProcessRun) {
  // Muon: each chunk's matrices are shared out over the stage's ranks.
  const fs::path cfg = config(kOptimizers[1], 10);
  ASSERT_EQ(run(trainer(cfg, "one", kFour)).status, 0);
  // DP2: the stage's sums start during each chunk's last backward, the last chunk first.
  expect_follows("one", 4, cfg, "dp2", "--set model.n_layer=4 --set train.micro_batch_size=1 --set parallel.data=2" + kInterleaved,
                 {"rank 3: gradients: this stage's data-parallel sums run bucket by bucket during its last micro-batch's "
                  "backward"});
  expect_follows("one", 4, cfg, "tp2", kFour + " --set parallel.tensor=2" + kInterleaved,
                 {"rank 3: layout: 1 data-parallel rank(s) over mpi, 2 tensor-parallel, 2 × 2 virtual pipeline stage(s) "
                  "(this one: blocks 1 to 1, 3 to 3)"});
  // Six layers: three chunks a rank, one block each; then two chunks split unevenly (virtual
  // stage s lies on rank s mod 2: rank 0 holds blocks 0-1 and 3, rank 1 block 2 and 4-5).
  const std::string six = "--set model.n_layer=6 --set train.micro_batch_size=2";
  ASSERT_EQ(run(trainer(cfg, "one6", six)).status, 0);
  expect_follows("one6", 2, cfg, "v3", six + " --set parallel.pipeline=2 --set parallel.virtual_stages=3",
                 {"rank 1: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 2 × 3 virtual pipeline stage(s) "
                  "(this one: blocks 1 to 1, 3 to 3, 5 to 5)"});
  expect_follows("one6", 2, cfg, "uneven", six + kInterleaved + " --set 'parallel.pipeline_layers=[2, 1, 1, 2]'",
                 {"rank 0: layout: 1 data-parallel rank(s) over mpi, 1 tensor-parallel, 2 × 2 virtual pipeline stage(s) "
                  "(this one: blocks 0 to 1, 3 to 3)"});
}

TEST_F(InterleavedPipeline, CheckpointsResumeInOneProcessAtPlain1F1BAndTheOtherWay) {
  // Shampoo: the most state, on both ranks, with the tied embedding's on the first and the last.
  const fs::path cfg = config(kOptimizers[2], 10);
  const std::string pp1 = kFour + " --set train.eval_every=5", v2 = pp1 + kInterleaved;
  ASSERT_EQ(run(trainer(cfg, "straight", pp1)).status, 0);
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "v2_pp1", v2 + " --set train.steps=5")).status, 0);
  expect_follows("straight", 1, cfg, "v2_pp1", pp1, {"resumed from"});
  // Interleaved -> plain 1F1B: rank 0 held blocks 0 and 2, now holds 0 and 1.
  ASSERT_EQ(run(mpirun(2) + trainer(cfg, "v2_pp2", v2 + " --set train.steps=5")).status, 0);
  expect_follows("straight", 2, cfg, "v2_pp2", pp1 + " --set parallel.pipeline=2", {"rank 1: resumed from"});
  ASSERT_EQ(run(trainer(cfg, "pp1_v2", pp1 + " --set train.steps=5")).status, 0);
  expect_follows("straight", 2, cfg, "pp1_v2", v2, {"rank 1: resumed from"});
}

}  // namespace
}  // namespace precon::worker
