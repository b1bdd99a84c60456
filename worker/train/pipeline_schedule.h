// Pipeline parallelism's schedule for one stage: 1F1B over a step's micro-batches (Megatron's
// non-interleaved schedule). Stage s of P runs min(P − s − 1, m) warm-up forwards, then alternates
// one forward and one backward, then drains the remaining backwards. Activations go to the next
// stage and their gradients back to the previous one as point-to-point messages over the
// pipeline group; sends are non-blocking and complete by the end of the step, receives block.
// Thread-compatible: the training thread drives it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "worker/data/loader.h"
#include "worker/model/gpt.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// Where a stage's time went during the schedules since construction.
struct PipelineTimes {
  double busy = 0;   // seconds in the model's forward and backward passes
  double total = 0;  // seconds from each schedule's start to its last message done
  double idle() const { return total - busy; }
};

// The activation slots a stage needs for m micro-batches under 1F1B.
int pipeline_slots(int stage, int stages, int64_t micro_batches);

class PipelineSchedule {
 public:
  // model: this stage's Gpt (GptStage with pipeline_slots() slots); pp: the pipeline group, whose
  // rank is the stage.
  PipelineSchedule(Gpt& model, Communicator& pp);

  // Forward and backward over every micro-batch, accumulating this stage's gradients; `ready`
  // goes to the last micro-batch's backward (Gpt::backward), so the gradient sums can start
  // while it runs. Returns the sum of the micro-batches' mean losses on the last stage, 0 on the
  // others.
  double train(const std::vector<Batch>& micro, const Gpt::GradsReady& ready = {});
  // Forward only (validation): the same sum.
  double evaluate(const std::vector<Batch>& micro);

  const PipelineTimes& times() const { return times_; }

 private:
  void forward(const Batch& b, int64_t index, bool compute_grad, double& loss);
  void backward(int64_t index, const Gpt::GradsReady& ready = {});
  void send(const kernels::Tensor& t, int peer);
  void finish_sends();

  struct Outgoing {
    std::vector<float> data;
    std::unique_ptr<PendingCollective> pending;
  };
  Gpt& model_;
  Communicator& pp_;
  int stage_, stages_;
  std::deque<Outgoing> outgoing_;
  PipelineTimes times_;
};

}  // namespace precon::worker
