// Llama (Hugging Face LlamaForCausalLM): pre-norm RMSNorm, rotary position embeddings (rotate-half,
// on q and k per head), grouped-query attention (n_kv_head key/value heads, each serving
// n_head / n_kv_head query heads), SwiGLU MLP down(silu(gate(x)) · up(x)), no biases, an untied
// output head unless model.tie_embeddings. Parameters follow llama_param_table (HF names, nn.Linear
// weights stored (out, in)). Under tensor parallelism q, k, v, gate and up are column-parallel (this
// rank's query heads, its kv heads, its MLP columns), o and down row-parallel; n_kv_head must be
// divisible by the ranks (kv heads are split, never replicated). With [model.moe] the MLP of each
// layer from model.moe.first_dense_layers on is a mixture of experts (worker/parallel/moe.h). With
// [model.mla] the attention is DeepSeek-V3's multi-head latent attention (mla.h). With
// model.mtp_layers = D, the chunk with the head also computes D multi-token prediction modules
// (DeepSeek-V3's MTP, docs/models.md) in training forwards: module k's block (like the last layer's)
// reads eh_proj [enorm(embedding of token i + k) | hnorm(module k − 1's output, the model's last
// hidden state for k = 1)] and the shared head predicts token i + k + 1 from shared_head.norm of its
// output; the gradient is that of loss + mtp_loss_coeff · the mean of the modules' losses, forward()
// still returns the model's own loss.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/model/mla.h"
#include "worker/parallel/moe.h"

namespace precon::worker {

class Llama final : public Model {
 public:
  // See Model's constructor; ep: the expert-parallel group of the mixture-of-experts layers (none:
  // every expert on this rank).
  Llama(const ModelConfig& config, int64_t batch_size, kernels::Device device, const std::string& precision = "fp32",
        TpGroup tp = {}, const ModelStage& stage = {}, ParamStore* shared = nullptr,
        TpGroup ep = {});
  double moe_alltoall_seconds() const override;

  // N(0, 0.02) matrices and embeddings, o_proj and down_proj scaled by 1/√(2L) (GPT-2's and
  // Megatron's residual scaling), unit norm weights. Deterministic in the seed.
  void init_random(uint64_t seed) override;
  double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad) override;
  void backward(const GradsReady& ready = {}) override;

 private:
  struct Acts;
  struct Block {
    size_t input_norm, post_norm;
    std::optional<ColumnParallelLinear> qkv;  // self_attn.{q,k,v}_proj: one input, three outputs
    std::optional<RowParallelLinear> o;       // self_attn.o_proj
    std::optional<MlaAttention> mla;          // multi-head latent attention in their place
    std::optional<ColumnParallelLinear> gate_up;  // mlp.{gate,up}_proj (a dense layer)
    std::optional<RowParallelLinear> down;        // mlp.down_proj
    std::optional<MoeMlp> moe;                    // a mixture-of-experts layer's MLP
    std::pair<size_t, size_t> rows;  // [first, end) of its table rows
  };
  // A multi-token prediction module's own rows: enorm, hnorm, eh_proj, shared_head.norm, and the
  // range of all its rows.
  struct MtpRows {
    size_t enorm, hnorm, eh, norm;
    std::pair<size_t, size_t> rows;
  };
  // Block l of the table (chunk index i) on its input; its output into the slot's output[i].
  void block_forward(int64_t l, size_t i, const kernels::Tensor& in, bool compute_grad);
  // Its backward: dres holds d output[i] and becomes d in (accumulated on the residual path).
  void block_backward(int64_t l, size_t i, const kernels::Tensor& in, kernels::Tensor dres);
  // The MTP modules' forward after the head's (their losses into the slot, their mean into
  // mtp_tally()), and their backward: d of the model's last hidden state into the slot's mtp_dh.
  void mtp_forward();
  void mtp_backward(const GradsReady& ready);
  std::unique_ptr<Acts> allocate_acts() const;
  int64_t family_activation_bytes() const override;

  MoeMlp::Shape moe_shape() const;
  MlaDims mla_dims() const;

  int64_t hd_, Ql_, KVl_, NKVl_, Fl_;  // head size; this rank's q and kv widths, kv heads, MLP width
  MoeMlp::Scratch moe_scratch_;        // the MoE layers' backward scratch (none in a dense model)
  size_t embed_, norm_, head_row_;     // table rows: embed_tokens, model.norm, lm_head (or embed_tokens)
  std::vector<Block> blocks_;  // the model's n_layer, then the MTP modules' (on the chunk with the head)
  std::vector<MtpRows> mtp_;   // the MTP modules' (on the chunk with the head)
  VocabParallelEmbedding embedding_;
  ColumnParallelLinear head_;
};

}  // namespace precon::worker
