// Pipeline parallelism's schedule for one pipeline rank: 1F1B over a step's micro-batches. With
// one model chunk a rank (Megatron's non-interleaved schedule) stage s of P runs min(P − s − 1, m)
// warm-up forwards, then alternates one forward and one backward, then drains the remaining
// backwards. With V chunks a rank (virtual stage v·P + s on rank s: Megatron's interleaved
// schedule) the same shape runs over m·V chunk-micro-batches, taken in groups of P micro-batches
// per chunk, chunks in order forwards and in reverse order backwards; the bubble shrinks to
// (P − 1)/(m·V) for V times the messages. Activations go to the next virtual stage and their
// gradients back to the previous one as point-to-point messages over the pipeline group (with
// chunks, rank P − 1 hands on to rank 0); sends are non-blocking and complete by the end of the
// step, receives block. Thread-compatible: the training thread drives it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "worker/data/loader.h"
#include "worker/model/model.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// Where a stage's time went during the schedules since construction.
struct PipelineTimes {
  double busy = 0;   // seconds in the model's forward and backward passes
  double total = 0;  // seconds from each schedule's start to its last message done
  double idle() const { return total - busy; }
};

// One entry of a rank's schedule: the forward or the backward of one micro-batch through one of
// the rank's model chunks (chunk v computes virtual stage v·stages + stage).
struct PipelineOp {
  bool forward = true;
  int chunk = 0;
  int64_t micro = 0;
};

// The order pipeline rank `stage` of `stages` runs a step in, with `chunks` model chunks and
// `micro_batches` micro-batches (with chunks > 1, a multiple of stages).
std::vector<PipelineOp> pipeline_order(int stage, int stages, int chunks, int64_t micro_batches);
// The activation slots each of the rank's chunks needs under that order: the most micro-batches
// the chunk holds at once between their forward and their backward (at least 1).
std::vector<int> pipeline_slots(int stage, int stages, int chunks, int64_t micro_batches);

class PipelineSchedule {
 public:
  // chunks: this rank's model chunks in virtual-stage order, each a Model over its ModelStage with
  // pipeline_slots() slots; pp: the pipeline group, whose rank is the stage. With two stages and
  // several chunks, activations and gradients share the channel from rank 1 to rank 0: the orders
  // post them as the peer receives them (test_pipeline_schedule.cpp checks every channel).
  PipelineSchedule(std::vector<Model*> chunks, Communicator& pp);

  // Forward and backward over every micro-batch, accumulating this rank's gradients; `ready` goes
  // to each chunk's last micro-batch's backward (Model::backward), last chunk first, so the gradient
  // sums can start while the earlier chunks run. Returns the sum of the micro-batches' mean losses
  // on the rank with the head, 0 on the others.
  double train(const std::vector<Batch>& micro, const Model::GradsReady& ready = {});
  // Forward only (validation): the same sum.
  double evaluate(const std::vector<Batch>& micro);

  const PipelineTimes& times() const { return times_; }

 private:
  void forward(const Batch& b, const PipelineOp& op, int slot, bool compute_grad, double& loss);
  void backward(const PipelineOp& op, int slot, const Model::GradsReady& ready);
  // Whether the chunk computes virtual stage 0 (it embeds the tokens: nothing to receive).
  bool first_virtual(int chunk) const { return chunk == 0 && stage_ == 0; }
  void send(const kernels::Tensor& t, int peer);
  void finish_sends();

  struct Outgoing {
    std::vector<float> data;
    std::unique_ptr<PendingCollective> pending;
  };
  std::vector<Model*> chunks_;
  Communicator& pp_;
  int stage_, stages_, prev_, next_;
  std::deque<Outgoing> outgoing_;
  PipelineTimes times_;
};

}  // namespace precon::worker
