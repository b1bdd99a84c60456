// Pipeline parallelism's parameters, gradients and optimizer state. Every rank holds the full
// model (as under tensor parallelism) and one optimizer per stage over that stage's rows; it
// computes and steps its own stage only. The tied embedding lives on the first and the last
// stage: both step it with the same summed gradient, as Megatron does. For a checkpoint every
// stage's parameters and state are brought to every rank from the stage's leader, so the first
// rank writes the full, layout-free model and optimizer state, and a resume at any layout loads it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/gpt.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/layout.h"

namespace precon::worker {

// The GptStage of pipeline stage s under the context's layout.
GptStage pipeline_stage(const ParallelContext& par, int s, int64_t micro_batches);

// One optimizer per stage; step() steps this rank's stage. The state lists every tensor once
// (the tied embedding's from the first stage), with the names a single-process optimizer gives;
// only the own stage's entries can be primary (written by this rank: the others' are stale here).
class StageOptimizers final : public Optimizer {
 public:
  StageOptimizers(std::vector<std::unique_ptr<Optimizer>> stages, int own);
  void step(const StepContext& ctx) override { stages_[own_]->step(ctx); }
  std::vector<NamedState> state_tensors() override;
  std::vector<StateKind> state_kinds() const override;
  // Objects merged key by key, counters summed; loading hands each stage the keys it has (the
  // counters to the first stage).
  nlohmann::json state_scalars() const override;
  void load_state_scalars(const nlohmann::json& scalars) override;
  PhaseSeconds phase_seconds() const override { return stages_[own_]->phase_seconds(); }
  int64_t inverse_root_failures() const override { return stages_[own_]->inverse_root_failures(); }
  int64_t comm_bytes() const override { return stages_[own_]->comm_bytes(); }
  std::string routing_summary() const override { return stages_[own_]->routing_summary(); }

  // After a resume: the state of the tied embedding, loaded into the first stage's optimizer,
  // copied to the last stage's.
  void copy_shared_state();
  // Collective over the world: every stage's optimizer counters from its leader to every rank
  // (the state tensors are written to checkpoints by the ranks that hold them).
  void gather(Communicator& world, const ParallelContext& par);

 private:
  std::vector<std::unique_ptr<Optimizer>> stages_;
  int own_;
};

// Collective over the world: every stage's parameters from its leader to every rank.
void gather_stage_params(Communicator& world, const ParallelContext& par, ParamStore& params);

// After the schedule: sums this stage's gradients over its tensor- and data-parallel ranks, scales
// them by `scale`, and sums the tied embedding's between the first and the last stage. Returns
// the bytes this rank all-reduced.
int64_t sum_stage_gradients(const ParallelContext& par, const Gpt& model, float scale);

// The global gradient norm: this stage's squared norm (the tied embedding counted once, on the
// first stage) summed over the stages.
double pipeline_grad_norm(const ParallelContext& par, const Gpt& model);

}  // namespace precon::worker
