// GPT-2 (pre-LN, learned positions, GELU-tanh, tied embeddings, biases) with explicit forward and
// backward passes over the kernels. Parameters follow the table in params.h (HF names/layouts) and
// the passes reach them by name: each layer's table rows are looked up once, at construction.
// Activations and backward scratch live in one allocation carved into named views.
// Shape letters: B batch, T sequence, C channels, NH heads, L layers, V vocabulary, Vp padded V.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "worker/config/config.h"
#include "worker/model/params.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// The part of the model one pipeline stage computes: transformer blocks [first_layer, end_layer)
// (end_layer < 0: up to n_layer), the embedding on the first stage, ln_f and the tied head on the
// last. `slots`: sets of activations, one per micro-batch in flight at once (1F1B holds up to the
// number of stages after this one, itself included).
struct GptStage {
  int64_t first_layer = 0;
  int64_t end_layer = -1;
  bool embedding = true;
  bool head = true;
  int slots = 1;
};

// The parameter table rows a stage computes with, in table order (wte on both ends of a pipeline).
std::vector<size_t> gpt_stage_rows(const std::vector<ParamSpec>& table, const GptStage& stage);

class Gpt {
 public:
  // precision: "fp32", or "bf16" (CUDA: bf16 activations and weight copies, fp32 masters/grads).
  // tp: the tensor-parallel group (null or size 1: the whole model here). With several ranks the
  // attention heads, MLP columns and vocabulary are split Megatron's way (params.h tp_shard_spec)
  // and this rank computes with its shard; params() still holds the full model, which the
  // optimizer updates and checkpoints save, and each forward takes the shard from it.
  // stage: the whole model by default; a pipeline stage computes only its blocks, and its
  // params() hold only its own rows (ParamStore's resident rows; the others get no memory).
  // shared: a store of the table's rows that several chunks of one rank compute with (interleaved
  // pipeline stages), which must hold this stage's rows and outlive this model; null: the model
  // allocates its own.
  Gpt(const ModelConfig& config, int64_t batch_size, kernels::Device device, const std::string& precision = "fp32",
      Communicator* tp = nullptr, const GptStage& stage = {}, ParamStore* shared = nullptr);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const ModelConfig& config() const { return config_; }
  int64_t batch_size() const { return B_; }
  ParamStore& params() { return *params_; }
  const ParamStore& params() const { return *params_; }

  // GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by 1/√(2L), zero
  // biases, unit layernorm weights. Deterministic in the seed.
  void init_random(uint64_t seed);

  // tokens, targets: B·T host ints; targets < 0 are ignored. Returns the mean loss over the
  // counted targets (0 on a stage without the head) and keeps what the backward needs. With
  // compute_grad, also writes d loss / d logits in place of the logits (fused), ready for backward().
  // A stage without the embedding reads its input from stage_input(), written before the call.
  double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad);
  // Accumulates parameter gradients (callers zero them once per step with params().zero_grads()).
  // `ready`, when given, is called with each range [first, end) of table rows as soon as their
  // gradients are final, from the end of the table to its start: ln_f, h.{L-1}, ..., h.0, then
  // wte and wpe (wte last: the tied head and the embedding both add to it). Data parallelism
  // starts each range's all-reduce there, while the earlier layers are still computed.
  using GradsReady = std::function<void(size_t first, size_t end)>;
  void backward(const GradsReady& ready = {});
  // Zeroes the gradients (the shard's too); of this stage's rows only when the store is shared.
  void zero_grads();

  // Pipeline stages, all (B, T, C) fp32 views of the selected slot's activations: the input a
  // stage without the embedding receives; the residual stream it hands on after forward(); the
  // gradient of that output, written before backward() on a stage without the head; and the
  // gradient of the input after backward(), for the previous stage.
  void select_slot(int slot);
  kernels::Tensor stage_input() const;
  kernels::Tensor stage_output() const;
  kernels::Tensor output_grad() const;
  kernels::Tensor input_grad() const;
  const GptStage& stage() const { return stage_; }
  // Tensor parallelism: writes the shard's gradients into params()'s at their place in the full
  // tensors, and the replicated ones on the group's first rank only (zeros elsewhere), so that a
  // sum over the tensor-parallel group (with the data-parallel sum, over the world) gives every
  // full gradient. The ready callback is not called under tensor parallelism.
  void place_grads_for_sum();
  int tp_size() const { return tp_size_; }

  // Logits of the last forward without compute_grad: (B, T, V) copied to the host.
  std::vector<float> logits_host() const;
  // Floating-point operations of one forward + backward (6·N·tokens + attention).
  double flops_per_step() const;
  int64_t activation_bytes() const;

 private:
  struct Acts;
  // Table rows of one transformer block's parameters, found by their HF names ("h.{l}.ln_1.weight", ...).
  struct LayerRows {
    size_t ln_1_w, ln_1_b;
    size_t c_attn_w, c_attn_b;        // attn.c_attn: fused q, k, v
    size_t attn_proj_w, attn_proj_b;  // attn.c_proj
    size_t ln_2_w, ln_2_b;
    size_t c_fc_w, c_fc_b;            // mlp.c_fc
    size_t mlp_proj_w, mlp_proj_b;    // mlp.c_proj
  };
  std::unique_ptr<Acts> allocate_acts() const;
  void cast_weights();
  // [first, end) of the table rows given, for the ready callback.
  static std::pair<size_t, size_t> row_range(std::initializer_list<size_t> rows);
  // What the passes read: the bf16 copy under bf16 precision, else the fp32 parameter.
  kernels::Tensor weight(size_t row) const;

  ParamStore& compute() const { return shard_ ? *shard_ : *params_; }  // what the passes read and write
  void take_shards();

  ModelConfig config_;
  int64_t B_, T_, C_, NH_, L_, V_, Vp_;
  GptStage stage_;
  int64_t L0_, L1_;  // this stage's blocks [L0_, L1_); per-layer activations are indexed l - L0_
  std::vector<size_t> stage_rows_;
  Communicator* tp_ = nullptr;
  int tp_size_ = 1, tp_rank_ = 0;
  int64_t Cl_, NHl_, Vpl_;  // this rank's share of the channels of a head group, the heads, the padded vocabulary
  kernels::Device device_;
  kernels::DType act_;
  std::unique_ptr<ParamStore> own_params_;  // null when the store is shared
  ParamStore* params_ = nullptr;            // own_params_ or the shared store
  std::unique_ptr<ParamStore> shard_;  // this rank's shard of every parameter (tensor parallelism only)
  size_t wte_, wpe_, ln_f_w_, ln_f_b_;  // table rows of the non-layer parameters
  std::vector<LayerRows> layers_;
  kernels::Buffer shadow_buf_;  // bf16 copies of the weights (bf16 precision only)
  std::vector<kernels::Tensor> shadow_;
  std::vector<std::unique_ptr<Acts>> slots_;
  Acts* acts_ = nullptr;  // the selected slot
};

}  // namespace precon::worker
