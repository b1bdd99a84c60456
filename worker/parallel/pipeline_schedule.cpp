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

std::vector<PipelineOp> pipeline_order(int stage, int stages, int chunks, int64_t m) {
  if (chunks > 1 && m % stages != 0)
    throw std::invalid_argument("interleaved pipeline: " + std::to_string(m) + " micro-batches are not a multiple of " +
                                std::to_string(stages) + " stages");
  // Chunk-micro-batch k (of m·V) is micro-batch (k / (P·V))·P + k mod P, through chunk
  // (k mod (P·V)) / P forwards and V − 1 minus that backwards (Megatron's interleaved order;
  // with one chunk, micro-batch k through the one chunk).
  const int64_t P = stages, V = chunks, total = m * V;
  const auto op = [&](int64_t k, bool forward) {
    const int64_t chunk = (k % (P * V)) / P;
    return PipelineOp{forward, static_cast<int>(forward ? chunk : V - 1 - chunk), (k / (P * V)) * P + k % P};
  };
  // Warm-up forwards before the first backward: one chunk, the stages after this one; several,
  // twice that plus a round of P for every chunk but one (all of them when m = P).
  int64_t warmup = V == 1 ? P - stage - 1 : (m == P ? total : (P - stage - 1) * 2 + (V - 1) * P);
  warmup = std::min(warmup, total);
  std::vector<PipelineOp> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(op(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(op(warmup + k, true));
    order.push_back(op(k, false));
  }
  for (int64_t k = std::max<int64_t>(0, total - warmup); k < total; ++k) order.push_back(op(k, false));
  return order;
}

std::vector<int> pipeline_slots(int stage, int stages, int chunks, int64_t micro_batches) {
  std::vector<int> slots(static_cast<size_t>(chunks), 1), held(static_cast<size_t>(chunks), 0);
  for (const PipelineOp& op : pipeline_order(stage, stages, chunks, micro_batches)) {
    int& h = held[static_cast<size_t>(op.chunk)];
    h += op.forward ? 1 : -1;
    slots[static_cast<size_t>(op.chunk)] = std::max(slots[static_cast<size_t>(op.chunk)], h);
  }
  return slots;
}

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
