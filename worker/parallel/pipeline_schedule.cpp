#include "worker/parallel/pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace precon::worker {

namespace k = kernels;

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

PipelineSchedule::PipelineSchedule(std::vector<Model*> chunks, Communicator& pp)
    : chunks_(std::move(chunks)), pp_(pp), stage_(pp.rank()), stages_(pp.size()),
      prev_((pp.rank() + pp.size() - 1) % pp.size()), next_((pp.rank() + 1) % pp.size()) {}

void PipelineSchedule::send(const k::Tensor& t, int peer) {
  // A copy: the slot's tensor is written again by a later micro-batch while the message may
  // still be in flight.
  Outgoing& out = outgoing_.emplace_back();
  out.data.assign(t.f32(), t.f32() + t.numel());
  out.pending = pp_.start_send(out.data.data(), t.numel(), peer);
  for (Outgoing& o : outgoing_) o.pending->poke();  // MPI moves messages on inside its calls only
}

void PipelineSchedule::finish_sends() {
  for (Outgoing& o : outgoing_) o.pending->wait();
  outgoing_.clear();
}

void PipelineSchedule::forward(const Batch& b, const PipelineOp& op, int slot, bool compute_grad, double& loss) {
  Model& model = *chunks_[static_cast<size_t>(op.chunk)];
  model.select_slot(slot);
  if (!first_virtual(op.chunk)) {
    k::Tensor in = model.stage_input();
    pp_.recv(in.f32(), in.numel(), prev_);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double micro_loss = model.forward(b.inputs, b.targets, compute_grad);
  times_.busy += since(t0);
  if (model.stage().head) loss += micro_loss;
  else send(model.stage_output(), next_);
}

void PipelineSchedule::backward(const PipelineOp& op, int slot, const Model::GradsReady& ready) {
  Model& model = *chunks_[static_cast<size_t>(op.chunk)];
  model.select_slot(slot);
  if (!model.stage().head) {
    k::Tensor dout = model.output_grad();
    pp_.recv(dout.f32(), dout.numel(), next_);
  }
  const auto t0 = std::chrono::steady_clock::now();
  model.backward(ready);
  times_.busy += since(t0);
  if (!first_virtual(op.chunk)) send(model.input_grad(), prev_);
}

double PipelineSchedule::train(const std::vector<Batch>& micro, const Model::GradsReady& ready) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t m = static_cast<int64_t>(micro.size());
  const int chunks = static_cast<int>(chunks_.size());
  double loss = 0.0;
  for (const PipelineOp& op : pipeline_order(stage_, stages_, chunks, m)) {
    const Model& model = *chunks_[static_cast<size_t>(op.chunk)];
    const int slot = static_cast<int>(op.micro % model.stage().slots);
    if (op.forward) {
      forward(micro[static_cast<size_t>(op.micro)], op, slot, true, loss);
    } else {
      // A chunk's micro-batch m − 1 is its last backward: its gradients are final as it reports them.
      backward(op, slot, op.micro == m - 1 ? ready : Model::GradsReady{});
    }
  }
  finish_sends();
  times_.total += since(t0);
  return loss;
}

double PipelineSchedule::evaluate(const std::vector<Batch>& micro) {
  const PipelineTimes training = times_;  // the times describe training steps only
  double loss = 0.0;
  // The schedule's forwards in its order (every chunk's micro-batches flow as in training), each
  // in slot 0: nothing is kept for a backward.
  for (const PipelineOp& op : pipeline_order(stage_, stages_, static_cast<int>(chunks_.size()),
                                             static_cast<int64_t>(micro.size())))
    if (op.forward) forward(micro[static_cast<size_t>(op.micro)], op, 0, false, loss);
  finish_sends();
  times_ = training;
  return loss;
}

}  // namespace precon::worker
