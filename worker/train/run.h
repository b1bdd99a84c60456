// One training run's parts and bookkeeping, and the steps that build them from the config
// (run_setup.cpp); the loop that drives them is trainer.cpp. Internal to worker/train.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/config/parse.h"
#include "worker/data/loader.h"
#include "worker/model/model.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/layout.h"
#include "worker/report/metrics.h"
#include "worker/report/reporter.h"
#include "worker/parallel/pipeline_state.h"
#include "worker/parallel/rank_optimizer.h"
#include "worker/parallel/step_runner.h"
#include "worker/train/train_state.h"
#include "worker/train/trainer.h"

namespace precon::worker {

// What a rank allocated for training, by kind (Model::Bytes and the optimizer's state kinds).
struct RankBytes {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0;
};

// Everything one run owns, built from the config, and the loop's bookkeeping.
struct Run {
  const TrainOptions* options = nullptr;
  std::function<void(const std::string&)> log;
  ParsedConfig parsed;
  TrialConfig& cfg() { return parsed.config; }
  kernels::Device device = kernels::Device::cpu;
  ParallelContext par;               // world, tensor-, data- and pipeline-parallel groups
  int64_t slice = 0;                 // sequences of the global batch this rank computes
  int64_t micro = 0;                 // sequences per forward/backward (slice / micro = micro-batches)
  // Interleaved pipeline stages: the one store of parameters and gradients the rank's chunks share.
  std::unique_ptr<ParamStore> rank_params;
  // This rank's model: one Model (the whole model, or its pipeline stage), or one per virtual stage
  // it computes, in virtual-stage order. Every chunk's params() is the rank's whole store.
  std::vector<std::unique_ptr<Model>> chunks;
  std::vector<size_t> rows;  // the table rows this rank holds, computes and steps, in table order
  Model& model() { return *chunks.front(); }
  std::unique_ptr<StepRunner> runner;  // the layout's forward/backward, gradient sums and evaluation
  PipelineTimes prev_pipe;             // the schedule's times at the last metrics record
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<RankOptimizer> optimizer;  // of this rank's rows (rank_optimizer.h)
  std::vector<Batch> val;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<Reporter> reporter;
  std::optional<double> objective;  // latest value of objective.metric emitted
  int64_t start = 0;                // the step the run resumed from (0 = a fresh run)
  int64_t last_checkpoint = 0;
  PhaseSeconds prev_phases;         // optimizer phase totals at the last metrics record
  double prev_comm_seconds = 0;     // gradient all-reduce wait at the last metrics record
  int64_t prev_comm_bytes = 0;
  int64_t prev_optim_bytes = 0;     // the optimizer's own collectives at the last metrics record
  ParallelContext::GroupBytes prev_group_bytes;  // per kind of group, at the last metrics record
  // This rank's bytes at start-up (parameters with their tensor-parallel parts and bf16 copies,
  // gradients, optimizer state, activations), and the largest of each over the ranks.
  RankBytes memory, memory_max;
  int64_t nan_fault_step = -1;      // test-only: PRECON_FAULT_NAN_LOSS_AT_STEP
  int64_t rank_fault_step = -1;     // test-only: PRECON_FAULT_RANK_ERROR=RANK:STEP fails this rank there
  int64_t kill_fault_step = -1;     // test-only: PRECON_FAULT_KILL_AT=step:S (worker/common/fault_hook.h)
  int64_t step_pace_ms = 0;         // test-only: PRECON_FAULT_STEP_PACE_MS sleeps after each step
  RunState state() {
    return {&parsed.config, chunks.front().get(), optimizer.get(), loader.get(), objective, par.world.get(),
            par.expert_dp ? par.expert_dp.get() : par.dp.get(), par.tp.get(), nullptr, nullptr};
  }
};

// Parses the config, checks the layout against the launched ranks, prepares the run directory,
// and selects the CPU threads and the device.
void configure_run(Run& run);
// The model (this rank's pipeline stage, or its chunks of virtual stages), initialised from
// train.init_from or the seed.
void build_model(Run& run);
void build_data(Run& run);
// The optimizer of this rank's rows (make_rank_optimizer).
void build_optimizer(Run& run);
// The layout's step runner over the model chunks (and the optimizer's gradient roots).
void build_step_runner(Run& run);
// --resume auto: the newest checkpoint that verifies; a directory: that one, which must verify.
void resume_run(Run& run);
// metrics.jsonl and the reporter (first rank only), the memory this rank holds (logged; the
// largest over the ranks kept for the metrics), and the test-only fault injection.
void open_outputs(Run& run);
// This rank's allocations, by kind.
RankBytes rank_bytes(Run& run);

}  // namespace precon::worker
