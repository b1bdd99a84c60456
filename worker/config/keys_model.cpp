// Key table rows: [model], [model.mla], [model.moe] and [model.rope_scaling].
#include <string>
#include <vector>

#include "worker/config/key_rows.h"

namespace precon::worker::key_rows {

#define T(path) [](TrialConfig& c) { return FieldRef{&c.path}; }

namespace {

// [model.rope_scaling]: YaRN (RopeScalingConfig). Not in the config hash: like model.rope_theta it
// changes no tensor a checkpoint holds.
void add_rope_scaling_rows(std::vector<Row>& k) {
  k.push_back(trial("model.rope_scaling.type", "",
                    "llama: none, or yarn (DeepSeek-V3's YaRN: the rotary frequencies blended between the original "
                    "and the interpolated ones, cos/sin and MLA's softmax scaled; docs/models.md)",
                    T(model.rope_scaling.type))
                  .choices({"none", "yarn"})
                  .rule([](const TrialConfig& c) {
                    return c.model.rope_scaling.yarn() && !c.model.llama()
                               ? std::string("type = \"yarn\" scales rotary embeddings: it needs model.arch = "
                                             "\"llama\" (gpt2 has learned positions)")
                               : std::string();
                  }));
  k.push_back(trial("model.rope_scaling.factor", "",
                    "yarn: how many times the original context the model is made for (> 1)",
                    T(model.rope_scaling.factor))
                  .range(1, 1e6)
                  .rule([](const TrialConfig& c) {
                    const RopeScalingConfig& r = c.model.rope_scaling;
                    if (r.yarn() && r.factor <= 1)
                      return std::string("factor = 1 leaves the frequencies as they are: YaRN needs factor > 1 (or "
                                         "model.rope_scaling.type = \"none\")");
                    if (!r.yarn() && r.factor != 1)
                      return "factor = " + std::to_string(r.factor) +
                             " does nothing without model.rope_scaling.type = \"yarn\"";
                    return std::string();
                  }));
  k.push_back(trial("model.rope_scaling.original_max_position_embeddings", "tokens",
                    "yarn: the context the rotary frequencies were made for (DeepSeek-V3: 4096); required with yarn",
                    T(model.rope_scaling.original_max_position_embeddings))
                  .range(0, 1 << 24)
                  .rule([](const TrialConfig& c) {
                    const RopeScalingConfig& r = c.model.rope_scaling;
                    return r.yarn() && r.original_max_position_embeddings == 0
                               ? std::string("original_max_position_embeddings is required with "
                                             "model.rope_scaling.type = \"yarn\": the context the frequencies were "
                                             "made for, in tokens")
                               : std::string();
                  }));
  k.push_back(trial("model.rope_scaling.beta_fast", "",
                    "yarn: rotations over the original context above which a pair keeps its frequency (more than "
                    "beta_slow)",
                    T(model.rope_scaling.beta_fast))
                  .range(1e-6, 1e6)
                  .rule([](const TrialConfig& c) {
                    const RopeScalingConfig& r = c.model.rope_scaling;
                    return r.beta_fast <= r.beta_slow
                               ? "beta_fast = " + std::to_string(r.beta_fast) +
                                     " must be more than model.rope_scaling.beta_slow = " + std::to_string(r.beta_slow)
                               : std::string();
                  }));
  k.push_back(trial("model.rope_scaling.beta_slow", "",
                    "yarn: rotations below which a pair's frequency is divided by factor", T(model.rope_scaling.beta_slow))
                  .range(1e-6, 1e6));
  k.push_back(trial("model.rope_scaling.mscale", "",
                    "yarn: cos and sin times (0.1·mscale·ln factor + 1) / (0.1·mscale_all_dim·ln factor + 1)",
                    T(model.rope_scaling.mscale))
                  .range(0, 1e3));
  k.push_back(trial("model.rope_scaling.mscale_all_dim", "",
                    "yarn, MLA: the softmax scale times (0.1·mscale_all_dim·ln factor + 1)² (DeepSeek-V3: 1); 0 = "
                    "unchanged; a model without [model.mla] takes 0",
                    T(model.rope_scaling.mscale_all_dim))
                  .range(0, 1e3)
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    return m.rope_scaling.yarn() && m.rope_scaling.mscale_all_dim != 0 && !m.uses_mla()
                               ? std::string("mscale_all_dim scales multi-head latent attention's softmax "
                                             "(DeepSeek-V3): without [model.mla] set it to 0")
                               : std::string();
                  }));
}

}  // namespace

void add_model_rows(std::vector<Row>& k) {
  // [model]
  k.push_back(trial("model.arch", "", "model family: gpt2 (GPT-2) or llama (RMSNorm, RoPE, grouped-query attention, SwiGLU)",
                    T(model.arch))
                  .choices({"gpt2", "llama"}).hashed()
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    if (!m.llama() && m.n_kv_head > 0 && m.n_kv_head != m.n_head)
                      return "gpt2 has no grouped-query attention: model.n_kv_head = " + std::to_string(m.n_kv_head) +
                             " must be 0 or n_head = " + std::to_string(m.n_head) + " (or set model.arch = \"llama\")";
                    if (!m.llama() && m.ffn_hidden > 0 && m.ffn_hidden != 4 * m.d_model)
                      return "gpt2's MLP is 4·d_model = " + std::to_string(4 * m.d_model) + " wide: model.ffn_hidden = " +
                             std::to_string(m.ffn_hidden) + " must be 0 or that (or set model.arch = \"llama\")";
                    if (m.llama() && m.d_model % m.n_head == 0 && (m.d_model / m.n_head) % 2 != 0)
                      return "llama's rotary embeddings need an even head size: d_model / n_head = " +
                             std::to_string(m.d_model / m.n_head);
                    return std::string();
                  }));
  k.push_back(trial("model.n_layer", "", "transformer blocks", T(model.n_layer)).range(1, 256).hashed());
  k.push_back(trial("model.n_head", "", "attention heads (must divide d_model)", T(model.n_head))
                  .range(1, 256).hashed()
                  .rule([](const TrialConfig& c) {
                    return c.model.d_model % c.model.n_head ? "n_head = " + ratio(c.model.n_head, "d_model", c.model.d_model)
                                                            : std::string();
                  }));
  k.push_back(trial("model.n_kv_head", "",
                    "llama: key/value heads of grouped-query attention (must divide n_head); 0 = n_head",
                    T(model.n_kv_head))
                  .range(0, 256).hashed()
                  .rule([](const TrialConfig& c) {
                    const int64_t kv = c.model.kv_heads();
                    return c.model.n_head % kv ? "n_kv_head = " + ratio(kv, "n_head", c.model.n_head) : std::string();
                  }));
  k.push_back(trial("model.d_model", "", "embedding width C", T(model.d_model)).range(1, 65536).hashed());
  k.push_back(trial("model.ffn_hidden", "",
                    "MLP width; 0 = the family's rule (gpt2: 4·d_model; llama: int(8/3·d_model) rounded up to a "
                    "multiple of 64)",
                    T(model.ffn_hidden))
                  .range(0, 1 << 20).hashed());
  k.push_back(trial("model.seq_len", "tokens", "context length T", T(model.seq_len)).range(1, 1 << 20).hashed());
  k.push_back(trial("model.vocab_size", "tokens", "vocabulary size V (padded internally)", T(model.vocab_size))
                  .range(1, 1 << 24).hashed());
  k.push_back(trial("model.rope_theta", "", "llama: base of the rotary position embeddings' frequencies",
                    T(model.rope_theta)).range(1, 1e12));
  k.push_back(trial("model.norm_eps", "", "llama: RMSNorm epsilon", T(model.norm_eps)).range(1e-12, 1));
  k.push_back(trial("model.tie_embeddings", "",
                    "llama: the output head is model.embed_tokens (no lm_head); gpt2 is always tied, whatever this says",
                    T(model.tie_embeddings)).hashed());
  k.push_back(trial("model.mtp_layers", "modules",
                    "llama: multi-token prediction modules D (DeepSeek-V3's MTP): module k predicts token i + k + 1 "
                    "from the embedding of token i + k and module k − 1's hidden state (the model's for k = 1) through "
                    "one more block like the last layer, sharing the embedding and the head; its parameters are "
                    "model.layers.{n_layer + k − 1}.*; 0 = none",
                    T(model.mtp_layers))
                  .range(0, 64).hashed()
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    if (m.mtp_layers == 0) return std::string();
                    if (!m.llama())
                      return "multi-token prediction needs model.arch = \"llama\" (model.mtp_layers = " +
                             std::to_string(m.mtp_layers) + ")";
                    if (m.mtp_layers >= m.seq_len)
                      return "model.mtp_layers = " + std::to_string(m.mtp_layers) + " must be less than model.seq_len = " +
                             std::to_string(m.seq_len) + ": module k has targets at the first seq_len − k positions only";
                    return std::string();
                  }));
  k.push_back(trial("model.mtp_loss_coeff", "",
                    "llama, MTP: λ, the weight of the mean of the modules' cross-entropies in the training loss "
                    "(train_loss and the validation loss stay the model's own; mtp_loss is reported beside them)",
                    T(model.mtp_loss_coeff))
                  .range(0, 1e3).hashed());
  // [model.mla]
  k.push_back(trial("model.mla.kv_lora_rank", "",
                    "llama: multi-head latent attention (DeepSeek-V3's MLA): width of the shared key/value latent "
                    "(at most d_model); 0 = grouped-query attention",
                    T(model.mla.kv_lora_rank))
                  .range(0, 65536).hashed()
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    if (m.mla.kv_lora_rank == 0) return std::string();
                    if (!m.llama())
                      return "[model.mla] needs model.arch = \"llama\" (model.mla.kv_lora_rank = " +
                             std::to_string(m.mla.kv_lora_rank) + ")";
                    if (m.mla.kv_lora_rank > m.d_model)
                      return "kv_lora_rank = " + std::to_string(m.mla.kv_lora_rank) + " is more than model.d_model = " +
                             std::to_string(m.d_model) + ": the latent compresses the input";
                    if (m.n_kv_head != 0 && m.n_kv_head != m.n_head)
                      return "multi-head latent attention has one key and value per head: model.n_kv_head = " +
                             std::to_string(m.n_kv_head) + " must be 0 or n_head = " + std::to_string(m.n_head);
                    return std::string();
                  }));
  k.push_back(trial("model.mla.q_lora_rank", "",
                    "llama, MLA: width of the query latent (q_a_proj, q_a_layernorm, q_b_proj); 0 = one q_proj",
                    T(model.mla.q_lora_rank))
                  .range(0, 65536).hashed());
  k.push_back(trial("model.mla.qk_nope_head_dim", "",
                    "llama, MLA: each head's query/key channels without rotary embeddings",
                    T(model.mla.qk_nope_head_dim))
                  .range(0, 4096).hashed());
  k.push_back(trial("model.mla.qk_rope_head_dim", "",
                    "llama, MLA: each head's query/key channels with rotary embeddings (the key's part is one "
                    "projection shared by all heads); even",
                    T(model.mla.qk_rope_head_dim))
                  .range(2, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const int64_t r = c.model.mla.qk_rope_head_dim;
                    return r % 2 ? "qk_rope_head_dim = " + std::to_string(r) +
                                       " must be even: rotary embeddings turn pairs of channels"
                                 : std::string();
                  }));
  k.push_back(trial("model.mla.v_head_dim", "", "llama, MLA: each head's value channels", T(model.mla.v_head_dim))
                  .range(1, 4096).hashed());
  // [model.moe]
  k.push_back(trial("model.moe.experts", "",
                    "llama: experts of each mixture-of-experts MLP (dropless top-k routing); 0 = a dense model",
                    T(model.moe.experts))
                  .range(0, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    if (m.moe.experts == 0) return std::string();
                    if (!m.llama())
                      return "[model.moe] needs model.arch = \"llama\": gpt2 has a dense MLP only (model.moe.experts = " +
                             std::to_string(m.moe.experts) + ")";
                    if (m.moe.first_dense_layers >= m.n_layer)
                      return "model.moe.first_dense_layers = " + std::to_string(m.moe.first_dense_layers) +
                             " leaves no mixture-of-experts layer of model.n_layer = " + std::to_string(m.n_layer);
                    return std::string();
                  }));
  k.push_back(trial("model.moe.top_k", "", "experts each token is sent to (at most model.moe.experts)", T(model.moe.top_k))
                  .range(1, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const MoeConfig& e = c.model.moe;
                    return e.experts > 0 && e.top_k > e.experts
                               ? "top_k = " + std::to_string(e.top_k) + " is more than model.moe.experts = " +
                                     std::to_string(e.experts)
                               : std::string();
                  }));
  k.push_back(trial("model.moe.ffn_hidden", "", "each expert's SwiGLU width; 0 = the dense MLP's (model.ffn_hidden)",
                    T(model.moe.ffn_hidden)).range(0, 1 << 20).hashed());
  k.push_back(trial("model.moe.shared_experts", "",
                    "a shared SwiGLU expert of width shared_experts × model.moe.ffn_hidden added to every token's output; "
                    "0 = none",
                    T(model.moe.shared_experts)).range(0, 64).hashed());
  k.push_back(trial("model.moe.first_dense_layers", "layers", "leading layers that keep the dense MLP",
                    T(model.moe.first_dense_layers)).range(0, 256).hashed());
  k.push_back(trial("model.moe.aux_loss_coeff", "",
                    "softmax router: load-balancing loss coefficient, aux = coeff · E · Σₑ fₑ·Pₑ per MoE layer, over "
                    "each micro-batch; must be 0 with router = sigmoid",
                    T(model.moe.aux_loss_coeff))
                  .range(0, 1e3).hashed()
                  .rule([](const TrialConfig& c) {
                    const MoeConfig& e = c.model.moe;
                    return e.experts > 0 && e.sigmoid() && e.aux_loss_coeff != 0
                               ? std::string("aux_loss_coeff is the softmax router's balance loss: with "
                                             "model.moe.router = \"sigmoid\" set it to 0 (the sigmoid router balances "
                                             "by model.moe.bias_update_rate and model.moe.seq_aux_loss_coeff)")
                               : std::string();
                  }));
  k.push_back(trial("model.moe.router_dtype", "", "the router's dtype: fp32 always", T(model.moe.router_dtype))
                  .choices({"fp32"}));
  k.push_back(trial("model.moe.router", "",
                    "softmax (top-k of the softmax, renormalised) or sigmoid (DeepSeek-V3: top-k of sigmoid scores "
                    "plus a per-expert bias, weights from the chosen scores normalised, times route_scale)",
                    T(model.moe.router))
                  .choices({"softmax", "sigmoid"}).hashed());
  k.push_back(trial("model.moe.route_scale", "",
                    "sigmoid router: factor on the normalised weights of the chosen experts", T(model.moe.route_scale))
                  .range(1e-6, 1e6).hashed());
  k.push_back(trial("model.moe.n_group", "",
                    "sigmoid router: expert groups for group-limited routing (a group's score is the sum of its two "
                    "best score + bias values); 1 = none",
                    T(model.moe.n_group))
                  .range(1, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const MoeConfig& e = c.model.moe;
                    if (e.experts == 0 || e.n_group == 1) return std::string();
                    if (!e.sigmoid())
                      return "n_group = " + std::to_string(e.n_group) +
                             ": group-limited routing needs model.moe.router = \"sigmoid\"";
                    if (e.experts % e.n_group == 0) return std::string();
                    return "n_group = " + std::to_string(e.n_group) + " does not divide model.moe.experts = " +
                           std::to_string(e.experts);
                  }));
  k.push_back(trial("model.moe.topk_group", "",
                    "sigmoid router: groups each token chooses its experts from (at most n_group)",
                    T(model.moe.topk_group))
                  .range(1, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const MoeConfig& e = c.model.moe;
                    if (e.experts == 0 || e.n_group < 1 || e.experts % e.n_group) return std::string();
                    if (e.topk_group > e.n_group)
                      return "topk_group = " + std::to_string(e.topk_group) + " is more than model.moe.n_group = " +
                             std::to_string(e.n_group);
                    const int64_t reach = e.topk_group * (e.experts / e.n_group);
                    return e.top_k > reach ? "topk_group = " + std::to_string(e.topk_group) + " groups of " +
                                                 std::to_string(e.experts / e.n_group) + " experts hold fewer than " +
                                                 "model.moe.top_k = " + std::to_string(e.top_k)
                                           : std::string();
                  }));
  k.push_back(trial("model.moe.bias_update_rate", "",
                    "sigmoid router: after each optimizer step each expert's bias moves by this times the sign of "
                    "(mean load - its load), the loads summed over every rank's tokens of the step; 0 = a fixed bias",
                    T(model.moe.bias_update_rate))
                  .range(0, 1e3).hashed());
  k.push_back(trial("model.moe.seq_aux_loss_coeff", "",
                    "sigmoid router: DeepSeek-V3's sequence-wise balance loss, coeff · Σᵢ fᵢ·Pᵢ per sequence (mean "
                    "over sequences) per MoE layer; 0 = none",
                    T(model.moe.seq_aux_loss_coeff))
                  .range(0, 1e3).hashed()
                  .rule([](const TrialConfig& c) {
                    const MoeConfig& e = c.model.moe;
                    return e.experts > 0 && !e.sigmoid() && e.seq_aux_loss_coeff != 0
                               ? "seq_aux_loss_coeff needs model.moe.router = \"sigmoid\" (the softmax router's "
                                 "balance loss is model.moe.aux_loss_coeff)"
                               : std::string();
                  }));
  add_rope_scaling_rows(k);
}

#undef T

}  // namespace precon::worker::key_rows
