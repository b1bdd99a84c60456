// The parameter tables of the model families: one row per tensor {name, shape, tp_split_dim, ...}
// drives allocation, gradients, optimizer state and routing, checkpoint names, pipeline placement
// and tensor-parallel splitting. Names and storage layouts are Hugging Face's (GPT-2: Conv1D
// weights stored (in, out); Llama: nn.Linear weights stored (out, in)).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "worker/config/config.h"

namespace precon::worker {

enum class ParamKind : uint8_t {
  embedding,  // a vocabulary matrix: wte (tied with the output head), embed_tokens, lm_head
  position,   // wpe
  norm,       // layernorm or RMSNorm weight, layernorm bias
  bias,       // linear-layer bias
  matrix,     // 2-D hidden linear weight (attention and MLP projections, each expert's own)
  router,     // a mixture-of-experts router (experts × d_model): AdamW's, like the other non-matrices
  buffer,     // model state no gradient reaches and no optimizer steps: the sigmoid router's expert
              // bias, moved by its own rule after each step (update_router_biases, worker/parallel/moe.h)
};

const char* param_kind_name(ParamKind kind);
// Whether an optimizer steps the row (every kind but buffer).
inline bool trained(ParamKind kind) { return kind != ParamKind::buffer; }

struct ParamSpec {
  std::string name;            // "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // storage shape (real vocabulary: padding is internal)
  ParamKind kind = ParamKind::matrix;
  int tp_split_dim = -1;       // storage dim split across tensor-parallel ranks; -1 = replicated
  // For matrices: the linear map's (fan_out, fan_in) whatever the storage layout. HF's Conv1D
  // stores (in, out) = (fan_in, fan_out), so shape-dependent optimizer terms use these fields.
  int64_t fan_in = 0, fan_out = 0;
  bool stored_in_out = false;  // storage is (fan_in, fan_out) (Conv1D); else (fan_out, fan_in)
  int qkv_blocks = 1;          // 3 for attn.c_attn: fused [q | k | v] along fan_out
  // Attention matrices: their heads, equal runs along one storage dim (along fan_out: q, k, v, the
  // fused c_attn's heads in each of its Q/K/V blocks, MLA's q_b or q_proj and kv_b; along fan_in when
  // heads_on_fan_in: o_proj, c_proj); 0 = not an attention matrix. optimizer.muon.split_heads.
  int64_t heads = 0;
  bool heads_on_fan_in = false;
  int64_t storage_rows = 0;    // wte: rows allocated (padded vocabulary, zero rows); 0 = shape[0]
  // Where it lies in a pipeline: the transformer block it belongs to, or (-1) at the ends: with the
  // embedding on the first stage, with the head on the last, or both (a tied embedding).
  int64_t layer = -1;
  bool embedding_end = false, head_end = false;
  // A routed expert's gate, up or down: its index in its mixture-of-experts layer of `experts`
  // (-1: not an expert's). Expert parallelism places it on one rank of each expert-parallel group.
  int64_t expert = -1, experts = 0;
  int64_t numel() const;          // of the visible shape
  int64_t storage_numel() const;  // of the allocated shape
};

// Padded vocabulary used internally for the embedding/logit storage (multiple of 64).
int64_t padded_vocab(int64_t vocab_size);

// Tensor parallelism. A parameter with tp_split_dim d is cut along d into `size` equal pieces;
// for the fused QKV weight and bias each of their qkv_blocks blocks is cut and rank r holds piece
// r of every block, in block order (its own heads' q, k and v); wte is cut by rows of its padded
// storage (a vocabulary part: storage_rows of them, shape[0] the real vocabulary's rows among
// them, possibly none). The others are replicated. This is what rank `rank` holds.
ParamSpec tp_part_spec(const ParamSpec& full, int size, int rank = 0);
// Copies rank's part between the full storage (host memory, storage_numel floats) and the
// part's (tp_part_spec(full, size).storage_numel() floats), in the direction asked.
void copy_tp_part(const ParamSpec& full, float* full_data, float* part_data, int rank, int size, bool into_part);

std::vector<ParamSpec> gpt2_param_table(const ModelConfig& config);
// Hugging Face LlamaForCausalLM's names and layouts (nn.Linear weights stored (out, in), no biases;
// lm_head absent when the embeddings are tied). A mixture-of-experts layer's MLP follows Qwen-MoE:
// mlp.gate (the router, E × C, replicated under tensor parallelism; with the sigmoid router followed by
// DeepseekV3's mlp.gate.e_score_correction_bias, E, a buffer), mlp.experts.{e}.{gate,up,down}_proj
// and mlp.shared_expert.{gate,up,down}_proj, each split like the dense MLP's. With multi-head latent
// attention ([model.mla]) the attention's rows are Hugging Face DeepseekV3's: self_attn.q_a_proj,
// q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; the
// latent projections and norms replicated, q_b (q_proj) and kv_b split by heads, o_proj by its input.
// A DeepseekV3-shaped model (ModelConfig::deepseek_v3) names its shared expert as DeepseekV3 does:
// mlp.shared_experts.
std::vector<ParamSpec> llama_param_table(const ModelConfig& config);
// "mlp.shared_experts" (DeepseekV3) or "mlp.shared_expert" (Qwen-MoE): the shared expert's prefix in a
// layer.
std::string shared_expert_prefix(const ModelConfig& config);
// The table of config.arch's family.
std::vector<ParamSpec> model_param_table(const ModelConfig& config);

// The part of the model one pipeline stage computes: transformer blocks [first_layer, end_layer)
// (end_layer < 0: up to n_layer), the embedding on the first stage, the final norm and the head on
// the last. `slots`: sets of activations, one per micro-batch in flight at once (1F1B holds up to
// the number of stages after this one, itself included). Under expert parallelism over
// `expert_ranks` ranks the stage holds only the routed experts of `expert_rank`: experts
// [expert_rank·E/expert_ranks, (expert_rank + 1)·E/expert_ranks) of each MoE layer.
struct ModelStage {
  int64_t first_layer = 0;
  int64_t end_layer = -1;
  bool embedding = true;
  bool head = true;
  int slots = 1;
  int expert_rank = 0, expert_ranks = 1;
};
// The transformer blocks of each (virtual) stage, first to last, pipeline × virtual_stages of them:
// parallel.pipeline_layers when given, else as even as possible (the earlier stages take the
// remainder; the last one also holds the head).
std::vector<int64_t> stage_layer_counts(const ParallelConfig& layout, int64_t n_layer);
// Virtual stage s of stages with these block counts: its blocks, the embedding on the first, the
// head on the last; one slot, every expert.
ModelStage pipeline_stage(const std::vector<int64_t>& counts, size_t s);
// The table rows pipeline rank p holds under the layout: its chunks' (virtual stage v·pipeline + p
// for each v), in table order; of the routed experts, expert-parallel rank `expert_rank`'s only.
std::vector<size_t> pipeline_rank_table_rows(const std::vector<ParamSpec>& table, const ParallelConfig& layout,
                                             int64_t n_layer, int p, int expert_rank);
// The expert-parallel rank that holds a table row among `ranks` (0 for every row that is not a
// routed expert's: those are on every rank).
int expert_holder(const ParamSpec& spec, int ranks);
// The table rows a stage computes with, in table order (a tied embedding on both ends of a pipeline).
std::vector<size_t> stage_rows(const std::vector<ParamSpec>& table, const ModelStage& stage);
// The row the first and the last stage both hold (a tied embedding), or table.size() if none.
size_t tied_embedding_row(const std::vector<ParamSpec>& table);

// This rank's place in its tensor-parallel group (size 1: it holds whole tensors).
struct TpPlace {
  int rank = 0, size = 1;
  bool operator==(const TpPlace&) const = default;
};

// Copies rank's part of one full tensor (host memory, storage_numel floats) into its part's
// storage (a tensor on any device), or the reverse.
void copy_part_from_full(const ParamSpec& full, const float* full_data, kernels::Tensor part, TpPlace tp);
void copy_part_to_full(const ParamSpec& full, float* full_data, const kernels::Tensor& part, TpPlace tp);

// One allocation for all parameters and one for all gradients, carved into named views in
// table order (the llm.c habit). Gradients share the parameter layout. A pipeline stage holds
// only its own rows (`resident`, by table index; empty = every row): the others keep their spec
// but get no memory, their param() and grad() are empty views (numel 0). Under tensor
// parallelism (`tp` of more than one rank) a split row holds only this rank's part
// (tp_part_spec): spec() stays the whole tensor's (its name, global shape and fan dims, what
// checkpoints and optimizers' shape terms use) and part() says what is held.
class ParamStore {
 public:
  ParamStore(std::vector<ParamSpec> table, kernels::Device device, std::vector<size_t> resident = {},
             TpPlace tp = {});
  const std::vector<ParamSpec>& table() const { return table_; }
  size_t size() const { return table_.size(); }
  const ParamSpec& spec(size_t i) const { return table_[i]; }
  const ParamSpec& part(size_t i) const { return parts_[i]; }
  TpPlace tp() const { return tp_; }
  // Whether row i is cut over the tensor-parallel ranks (false for every row of one rank).
  bool split(size_t i) const { return tp_.size > 1 && table_[i].tp_split_dim >= 0; }
  bool resident(size_t i) const { return resident_[i]; }
  bool holds_all() const { return std::find(resident_.begin(), resident_.end(), false) == resident_.end(); }
  // Storage views of what this rank holds (wte with its padded rows): what the model and the
  // optimizers work on.
  kernels::Tensor param(size_t i) const { return params_[i]; }
  kernels::Tensor grad(size_t i) const { return grads_[i]; }
  // The visible rows (real vocabulary) of what is held: with one tensor-parallel rank, what
  // checkpoints hold.
  kernels::Tensor visible_param(size_t i) const;
  kernels::Tensor param(const std::string& name) const;
  kernels::Tensor grad(const std::string& name) const;
  size_t index(const std::string& name) const;  // throws std::out_of_range with the name
  kernels::Tensor all_params() const;  // flat view of every resident parameter
  kernels::Tensor all_grads() const;
  int64_t total_numel() const { return total_; }  // of the resident rows' storage
  void zero_grads();

 private:
  std::vector<ParamSpec> table_, parts_;
  TpPlace tp_;
  std::vector<bool> resident_;
  kernels::Buffer param_buf_, grad_buf_;
  std::vector<kernels::Tensor> params_, grads_;
  int64_t total_ = 0;
};

}  // namespace precon::worker
