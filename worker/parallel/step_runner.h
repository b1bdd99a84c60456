// How one training step's gradients and one evaluation's loss are computed for this rank's layout,
// chosen once at set-up so that the training loop never branches on it:
//   BatchRunner     one stage: the micro-batches of this rank's slice, one after the other;
//   PipelineRunner  several stages: the 1F1B schedule over the rank's chunks.
// Both hand the ranges each last backward finishes to the one gradient assembly
// (grad_assembly.h), which makes every layout's gradients whole. Every runner leaves the mean
// gradient of the whole global batch in each rank's buffer (or, for a gradient with a root, in the
// root's only) and returns losses every rank knows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/data/loader.h"
#include "worker/model/model.h"
#include "worker/parallel/grad_assembly.h"
#include "worker/parallel/layout.h"
#include "worker/parallel/pipeline_schedule.h"

namespace precon::worker {

// A step's mixture-of-experts figures, the same on every rank (all zero and empty for a dense model).
struct MoeReport {
  double aux_loss = 0;  // the load-balancing loss (summed over layers), mean over the step's micro-batches
  double load_max = 0;  // the largest fₑ·E over experts and MoE layers: 1 is perfect balance, E all on one
  double alltoall_seconds = 0;  // this rank's seconds in the step's expert-parallel all-to-alls
  // Per layer of the model (empty for a dense one), fₑ·E of each expert: its share of the step's
  // assignments times E.
  std::vector<std::vector<double>> load;
  // Per layer, the step's tokens routed to each expert over every rank (what the sigmoid router's
  // bias update reads).
  std::vector<std::vector<double>> counts;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Zeroes the gradients, runs the forward and backward passes over this rank's micro-batches of
  // the global batch and sums the gradients; returns the training loss (the mean over the batch).
  virtual double forward_backward(const Batch& batch) = 0;
  // The global norm of the gradient forward_backward left, as one process computes it. Every rank
  // must call it.
  virtual double grad_norm() = 0;
  // The mean loss over a global batch, forward only.
  virtual double evaluate(const Batch& batch) = 0;
  // What the last forward_backward's micro-batches routed (and clears the models' tallies). Every
  // rank must call it after each forward_backward.
  virtual MoeReport moe_report() = 0;
  // Multi-token prediction (model.mtp_layers > 0): the mean over the last forward_backward's
  // micro-batches of the mean of the modules' losses (and clears the models' tallies); 0 without
  // modules. Every rank must call it after each forward_backward.
  virtual double mtp_loss() = 0;
  // Since construction: seconds blocked waiting for gradient sums after the backward, and the
  // bytes this rank sent into them.
  virtual double comm_wait_seconds() const = 0;
  virtual int64_t comm_bytes() const = 0;
  // The schedule's times under pipelining; null with one stage.
  virtual const PipelineTimes* pipeline_times() const { return nullptr; }
  // What was chosen, one line each, for the run's log.
  const std::vector<std::string>& notes() const { return notes_; }

 protected:
  std::vector<std::string> notes_;
};

// What a runner works on, all owned by the run and outliving the runner.
struct StepParts {
  const ParallelContext* par = nullptr;
  std::vector<Model*> chunks;  // this rank's model chunks in virtual-stage order (one without interleaving)
  int64_t slice = 0;           // sequences of the global batch this rank computes
  int64_t micro = 0;           // sequences per forward/backward
  std::vector<size_t> rows;    // the table rows this rank holds, in table order
  // Per table row, the data-parallel rank that alone reads the summed gradient (-1: every rank);
  // empty: all-reduce every gradient. Used with one stage and data parallelism.
  std::vector<int> roots;
  // Expert parallelism: per table row, the expert-stage rank (ParallelContext::expert_stage) that
  // alone reads a routed expert's summed gradient; roots then names the other rows' only.
  std::vector<int> expert_roots;
};

std::unique_ptr<StepRunner> make_step_runner(const StepParts& parts);

// This rank's micro-batches of a global batch: rows dp_rank · slice + j · micro, j = 0, 1, ...
std::vector<Batch> micro_batches(const ParallelContext& par, int64_t slice, int64_t micro, const Batch& batch);

}  // namespace precon::worker
