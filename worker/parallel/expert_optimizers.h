// Expert parallelism's optimizer state. A rank holds the routed experts of its expert-parallel rank
// only (ModelStage::expert_rank): their parameters, gradients and optimizer state live with the
// ranks of the same expert-parallel rank (ParallelContext::expert_stage), which sum their
// gradients and share out Muon's and Shampoo's per-matrix work among themselves, each expert a
// matrix of its own; the rest of the model is stepped as without experts, over the whole stage.
// Checkpoints write each expert's state from the ranks that hold it, under the names one process
// gives it, so a resume at any layout loads it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/optim/optimizer.h"
#include "worker/parallel/layout.h"

namespace precon::worker {

class ExpertOptimizers final : public Optimizer {
 public:
  // dense: the optimizer of every row but the routed experts'; experts: of this rank's experts.
  // ep: the expert-parallel group (one rank of each set of experts), for the counters.
  ExpertOptimizers(std::unique_ptr<Optimizer> dense, std::unique_ptr<Optimizer> experts, Communicator& ep);
  void step(const StepContext& ctx) override;
  std::vector<NamedState> state_tensors() override;
  std::vector<StateKind> state_kinds() const override;
  // The dense side's and, after gather(), every expert-parallel rank's experts' merged key by key
  // (counters summed); loading hands each side the keys it has (the counters to the dense side).
  nlohmann::json state_scalars() const override;
  void load_state_scalars(const nlohmann::json& scalars) override;
  PhaseSeconds phase_seconds() const override;
  int64_t inverse_root_failures() const override;
  int64_t comm_bytes() const override;
  std::string routing_summary() const override;
  Optimizer& dense() { return *dense_; }
  Optimizer& experts() { return *experts_; }

  // Collective over the expert-parallel group: every rank's experts' counters to every rank.
  void gather();

 private:
  std::unique_ptr<Optimizer> dense_, experts_;
  Communicator& ep_;
  std::vector<nlohmann::json> others_;  // each expert-parallel rank's experts' counters, as of the last gather()
};

}  // namespace precon::worker
