#include "worker/train/pipeline_schedule.h"

#include <algorithm>
#include <chrono>

namespace precon::worker {

namespace k = kernels;

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int pipeline_slots(int stage, int stages, int64_t micro_batches) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(stages - stage, micro_batches)));
}

PipelineSchedule::PipelineSchedule(Gpt& model, Communicator& pp)
    : model_(model), pp_(pp), stage_(pp.rank()), stages_(pp.size()) {}

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

void PipelineSchedule::forward(const Batch& b, int64_t index, bool compute_grad, double& loss) {
  model_.select_slot(static_cast<int>(index % model_.stage().slots));
  if (stage_ > 0) {
    k::Tensor in = model_.stage_input();
    pp_.recv(in.f32(), in.numel(), stage_ - 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double micro_loss = model_.forward(b.inputs, b.targets, compute_grad);
  times_.busy += since(t0);
  if (stage_ == stages_ - 1) loss += micro_loss;
  else send(model_.stage_output(), stage_ + 1);
}

void PipelineSchedule::backward(int64_t index, const Gpt::GradsReady& ready) {
  model_.select_slot(static_cast<int>(index % model_.stage().slots));
  if (stage_ < stages_ - 1) {
    k::Tensor dout = model_.output_grad();
    pp_.recv(dout.f32(), dout.numel(), stage_ + 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  model_.backward(ready);
  times_.busy += since(t0);
  if (stage_ > 0) send(model_.input_grad(), stage_ - 1);
}

double PipelineSchedule::train(const std::vector<Batch>& micro, const Gpt::GradsReady& ready) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t m = static_cast<int64_t>(micro.size());
  const int64_t warmup = std::min<int64_t>(stages_ - stage_ - 1, m), steady = m - warmup;
  double loss = 0.0;
  for (int64_t i = 0; i < warmup; ++i) forward(micro[i], i, true, loss);
  // Micro-batch m - 1's backward is the last: its gradients are final as it reports them.
  const auto last = [&](int64_t i) { return i == m - 1 ? ready : Gpt::GradsReady{}; };
  for (int64_t i = 0; i < steady; ++i) {
    forward(micro[warmup + i], warmup + i, true, loss);
    backward(i, last(i));
  }
  for (int64_t i = steady; i < m; ++i) backward(i, last(i));
  finish_sends();
  times_.total += since(t0);
  return loss;
}

double PipelineSchedule::evaluate(const std::vector<Batch>& micro) {
  const PipelineTimes training = times_;  // the times describe training steps only
  double loss = 0.0;
  for (size_t i = 0; i < micro.size(); ++i) forward(micro[i], 0, false, loss);
  finish_sends();
  times_ = training;
  return loss;
}

}  // namespace precon::worker
