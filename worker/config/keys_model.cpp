// Key table rows: [model], [model.mla] and [model.moe].
#include <string>
#include <vector>

#include "worker/config/key_rows.h"

namespace precon::worker::key_rows {

#define T(path) [](TrialConfig& c) { return FieldRef{&c.path}; }

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
                    "load-balancing loss coefficient: aux = coeff · E · Σₑ fₑ·Pₑ per MoE layer, over each micro-batch",
                    T(model.moe.aux_loss_coeff)).range(0, 1e3).hashed());
  k.push_back(trial("model.moe.router_dtype", "", "the router's dtype: fp32 always", T(model.moe.router_dtype))
                  .choices({"fp32"}));
}

#undef T

}  // namespace precon::worker::key_rows
