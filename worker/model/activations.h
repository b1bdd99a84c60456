// The activation plan: every buffer a model allocates for its forward and backward (the activations
// the backward reads, the backward's scratch, a mixture of experts' routing and expert rows), by
// name, shape and type, for one micro-batch of one (tensor-parallel part of a) pipeline chunk. The
// model families carve their slots from these plans, and the memory estimate sums the same plans,
// so `precon recipe check` and the trainer's pre-check count exactly what the trainer allocates.
// Shape letters as in model.h; each buffer is rounded up to 64 bytes, as it is carved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "worker/config/config.h"

namespace precon::worker {

struct ActBuffer {
  std::string name;             // the member it becomes (model.h Acts, moe.h MoeMlp::Acts ...)
  int64_t layer = -1;           // index among the chunk's blocks; -1: one per slot
  std::vector<int64_t> shape;   // 1 to 4 dimensions
  kernels::DType dtype = kernels::DType::f32;
  int64_t bytes() const;        // rounded up to 64
};
using ActPlan = std::vector<ActBuffer>;
int64_t plan_bytes(const ActPlan& plan);

// One chunk of one rank: micro-batch B, tensor-parallel ranks, blocks [first_layer, end_layer)
// (end_layer -1: to n_layer), the activations' type (train.precision).
struct ActShape {
  int64_t batch = 1;
  int64_t tensor = 1;
  int64_t first_layer = 0, end_layer = -1;
  kernels::DType dtype = kernels::DType::f32;
};

// One activation slot of a gpt2 or llama chunk (a llama's mixture-of-experts layers have their
// own plans below, one per MoE layer and slot).
ActPlan gpt_slot_plan(const ModelConfig& model, const ActShape& shape);
ActPlan llama_slot_plan(const ModelConfig& model, const ActShape& shape);

// A mixture-of-experts layer over N tokens: expert_width and shared_width per tensor-parallel rank
// (shared_width 0: no shared expert); expert_parallel: the experts' rows are exchanged (an
// expert-parallel group of more than one rank).
struct MoeDims {
  int64_t tokens = 0, channels = 0, experts = 0, top_k = 1, expert_width = 0, shared_width = 0;
  kernels::DType dtype = kernels::DType::f32;
  bool expert_parallel = false;
};
MoeDims moe_dims(const ModelConfig& model, const ActShape& shape, bool expert_parallel);
ActPlan moe_acts_plan(const MoeDims& d);     // one per MoE layer and slot
ActPlan moe_scratch_plan(const MoeDims& d);  // one per model chunk
// The rows this rank's experts compute, R of them: N·k without expert parallelism; under it the
// received rows, which follow the routing (the estimate takes the balanced N·k).
ActPlan moe_rows_plan(const MoeDims& d, int64_t rows);
ActPlan moe_scratch_rows_plan(const MoeDims& d, int64_t rows);

// Bytes of one model chunk's activations with `slots` slots (the pipeline schedule's in-flight
// micro-batches): what Model::bytes().activations reports for it. qk_clip: the attention row
// maxima QK-clip tracks (optimizer.qk_clip_threshold > 0).
int64_t chunk_activation_bytes(const ModelConfig& model, const ActShape& shape, int slots, bool expert_parallel,
                               bool qk_clip);

// Named tensors of one allocation: a family says where each planned buffer goes, then carves the
// plan from one buffer (min_bytes: the least it allocates).
class ActTargets {
 public:
  ActTargets& one(const std::string& name, kernels::Tensor& t);
  ActTargets& layers(const std::string& name, std::vector<kernels::Tensor>& v);
  kernels::Buffer allocate(const ActPlan& plan, kernels::Device device, int64_t min_bytes = 0) const;

 private:
  std::vector<std::pair<std::string, kernels::Tensor*>> one_;
  std::vector<std::pair<std::string, std::vector<kernels::Tensor>*>> layers_;
};

}  // namespace precon::worker
