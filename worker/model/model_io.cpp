#include "worker/model/model_io.h"

#include "kernels/backend.h"
#include "worker/ckpt/safetensors.h"
#include "worker/model/rope_scaling.h"

namespace precon::worker {

namespace k = kernels;

namespace {
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}
}  // namespace

void write_model_safetensors(ByteSink& out, const std::vector<ParamSpec>& table, const ModelConfig& config,
                             const ModelTensorFetch& fetch) {
  std::vector<float> whole;  // one tensor at a time
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < table.size(); ++i) {
    const ParamSpec& spec = table[i];
    entries.push_back({spec.name, SafetensorsDType::F32, spec.shape, nullptr, [&, i](ByteSink& sink) {
                         const ParamSpec& s = table[i];
                         whole.assign(static_cast<size_t>(s.storage_numel()), 0.0f);
                         fetch(i, whole);
                         // The visible rows lead the storage (padded vocabulary rows follow them).
                         sink.write(whole.data(), static_cast<size_t>(s.numel()) * sizeof(float));
                       }});
  }
  SafetensorsMetadata meta{{"format", "pt"}, {"producer", "precon"}, {"config", hf_config_json(config).dump()}};
  write_safetensors(out, entries, meta);
}

void write_model_safetensors(ByteSink& out, const ParamStore& params, const ModelConfig& config) {
  if (!params.holds_all())
    throw ModelIoError("model.safetensors needs every parameter, and this pipeline stage holds only its own: "
                       "gather the stages first");
  if (params.tp().size > 1)
    throw ModelIoError("model.safetensors needs whole tensors, and this tensor-parallel rank holds only its parts: "
                       "gather them first");
  // Contiguous fp32 parameters in host memory are written from where they are; others (on a
  // GPU, strided) are copied to the host one at a time as the file reaches them.
  std::vector<float> host;
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params.spec(i);
    const k::Tensor visible = params.visible_param(i);
    if (visible.device == k::Device::cpu && visible.dtype == k::DType::f32 && visible.contiguous()) {
      entries.push_back({spec.name, SafetensorsDType::F32, spec.shape, visible.data});
      continue;
    }
    entries.push_back({spec.name, SafetensorsDType::F32, spec.shape, nullptr, [&host, visible](ByteSink& sink) {
                         host.resize(static_cast<size_t>(visible.numel()));
                         k::Tensor dst = visible;
                         dst.data = host.data();
                         dst.device = k::Device::cpu;
                         k::copy(dst, visible);
                         sink.write(host.data(), host.size() * sizeof(float));
                       }});
  }
  SafetensorsMetadata meta{{"format", "pt"}, {"producer", "precon"}, {"config", hf_config_json(config).dump()}};
  write_safetensors(out, entries, meta);
}

std::vector<uint8_t> model_safetensors_bytes(const ParamStore& params, const ModelConfig& config) {
  VectorSink sink;
  write_model_safetensors(sink, params, config);
  return std::move(sink.bytes());
}

void load_model_safetensors(ParamStore& params, const std::filesystem::path& path) {
  SafetensorsFile file = [&] {
    try {
      return SafetensorsFile::open(path);
    } catch (const std::exception& e) {
      throw ModelIoError(std::string("cannot load model weights: ") + e.what());
    }
  }();
  const std::string where = path.string();
  const bool llama = params.spec(0).name == "model.embed_tokens.weight";
  bool mla = false;
  for (const ParamSpec& spec : params.table()) mla = mla || spec.name.ends_with(".kv_a_proj_with_mqa.weight");
  const std::string family = !llama ? "gpt2" : (mla ? "DeepseekV3 (llama with [model.mla])" : "llama");
  // A file of the other family says so, instead of a missing tensor.
  const char* other = llama ? "wte.weight" : "model.embed_tokens.weight";
  if (!params.table().empty() && !file.find(params.spec(0).name) && file.find(other)) {
    throw ModelIoError(where + " holds a " + std::string(llama ? "gpt2" : "llama") + " model (tensor " + other +
                       ") but this model is model.arch = \"" + std::string(llama ? "llama" : "gpt2") +
                       "\": set model.arch to the file's family");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params.spec(i);
    const SafetensorsTensor* t = file.find(spec.name);
    if (!t) {
      throw ModelIoError(where + ": tensor " + spec.name + " is missing: the file is not a " + family +
                         " model with this configuration" +
                         (spec.name == "lm_head.weight" ? " (its head may be tied: model.tie_embeddings = true)" : ""));
    }
    if (t->shape != spec.shape) {
      throw ModelIoError(where + ": tensor " + spec.name + " has shape " + shape_text(t->shape) + " but the model " +
                         "expects " + shape_text(spec.shape) + ": the checkpoint was written for a different " +
                         "model shape (check model.n_layer/n_head/n_kv_head/d_model/ffn_hidden/seq_len/vocab_size" +
                         (spec.name.find(".mlp.") != std::string::npos ? " and [model.moe]" : "") + ")");
    }
    if (!params.resident(i)) continue;  // another pipeline stage's row
    std::vector<float> host(static_cast<size_t>(spec.numel()));
    try {
      safetensors_to_f32(*t, host);
    } catch (const SafetensorsError& e) {
      throw ModelIoError(where + ": " + e.what());
    }
    if (params.split(i)) {  // the whole tensor read, this rank's part of it kept
      host.resize(static_cast<size_t>(spec.storage_numel()), 0.0f);  // padded vocabulary rows are zero
      copy_part_from_full(spec, host.data(), params.param(i), params.tp());
      continue;
    }
    if (spec.storage_rows > 0) k::fill_zero(params.param(i));
    k::Tensor dst = params.visible_param(i);
    k::Tensor src = dst;
    src.data = host.data();
    src.device = k::Device::cpu;
    k::copy(dst, src);
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    bool known = false;
    for (size_t i = 0; i < params.size() && !known; ++i) known = params.spec(i).name == t.name;
    // HF GPT-2 checkpoints may carry the causal-mask buffers and an explicit tied head; HF Llama
    // ones the rotary embeddings' inverse frequencies.
    const bool ignorable = (!llama && (t.name.ends_with(".attn.bias") || t.name.ends_with(".attn.masked_bias") ||
                                       t.name == "lm_head.weight")) ||
                           (llama && t.name.ends_with(".rotary_emb.inv_freq"));
    if (!known && !ignorable) {
      throw ModelIoError(where + ": unexpected tensor " + t.name + " (not part of this " + family + " model" +
                         (t.name == "lm_head.weight" ? ": its head is untied, set model.tie_embeddings = false)" : ")"));
    }
  }
}

namespace {

nlohmann::json family_config_json(const ModelConfig& c);
nlohmann::json deepseek_v3_config_json(const ModelConfig& c);

// HF's rope_scaling for YaRN (null without): DeepSeek-V3's keys, which LlamaConfig reads too, and
// the cos/sin factor written out as attention_factor, so that readers that derive it otherwise
// (from mscale alone when mscale_all_dim is 0) use precon's.
nlohmann::json rope_scaling_json(const ModelConfig& c) {
  const RopeScalingConfig& r = c.rope_scaling;
  if (!r.yarn()) return nullptr;
  return {{"type", "yarn"},
          {"rope_type", "yarn"},
          {"factor", r.factor},
          {"original_max_position_embeddings", r.original_max_position_embeddings},
          {"beta_fast", r.beta_fast},
          {"beta_slow", r.beta_slow},
          {"mscale", r.mscale},
          {"mscale_all_dim", r.mscale_all_dim},
          {"attention_factor", model_rope(c).attention_factor}};
}

}  // namespace

nlohmann::json hf_config_json(const ModelConfig& c) {
  if (c.deepseek_v3()) return deepseek_v3_config_json(c);
  nlohmann::json j = family_config_json(c);
  if (c.llama() && c.rope_scaling.yarn()) j["rope_scaling"] = rope_scaling_json(c);
  if (c.uses_mla()) {
    // MLA with the softmax router has no Hugging Face architecture: the family's config with
    // DeepseekV3's attention fields; the rotary pairs are rotate-half's (not interleaved).
    j["q_lora_rank"] = c.mla.q_lora_rank > 0 ? nlohmann::json(c.mla.q_lora_rank) : nlohmann::json(nullptr);
    j["kv_lora_rank"] = c.mla.kv_lora_rank;
    j["qk_nope_head_dim"] = c.mla.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.mla.qk_rope_head_dim;
    j["v_head_dim"] = c.mla.v_head_dim;
    j["head_dim"] = c.mla.qk_rope_head_dim;
    j["rope_interleave"] = false;
    j["num_key_value_heads"] = c.n_head;
  }
  // DeepseekV3's count of multi-token prediction modules (stored as layers num_hidden_layers + k − 1).
  if (c.llama() && c.mtp_layers > 0) j["num_nextn_predict_layers"] = c.mtp_layers;
  if (c.llama() && c.moe.experts > 0 && c.moe.sigmoid()) {
    // The sigmoid router on grouped-query attention (no Hugging Face architecture either):
    // DeepseekV3's router fields, sigmoid scores, top-k on score + e_score_correction_bias.
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["n_routed_experts"] = c.moe.experts;
    j["n_shared_experts"] = c.moe.shared_experts;
    j["n_group"] = c.moe.n_group;
    j["topk_group"] = c.moe.topk_group;
    j["routed_scaling_factor"] = c.moe.route_scale;
    j["first_k_dense_replace"] = c.moe.first_dense_layers;
    j["router_aux_loss_coef"] = c.moe.seq_aux_loss_coeff;
  }
  return j;
}

namespace {

// DeepseekV3ForCausalLM's config (MLA; dense, or the sigmoid router's experts after the first
// first_k_dense_replace layers, a shared MLP of n_shared_experts × moe_intermediate_size). The
// rotary pairs are rotate-half's: rope_interleave false.
nlohmann::json deepseek_v3_config_json(const ModelConfig& c) {
  const MlaConfig& a = c.mla;
  const MoeConfig& e = c.moe;
  const bool moe = e.experts > 0;
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v3"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.d_model},
          {"intermediate_size", c.ffn()},
          {"moe_intermediate_size", c.expert_ffn()},
          {"num_hidden_layers", c.n_layer},
          // The multi-token prediction modules (stored as layers num_hidden_layers + k − 1).
          {"num_nextn_predict_layers", c.mtp_layers},
          {"num_attention_heads", c.n_head},
          {"num_key_value_heads", c.n_head},
          {"q_lora_rank", a.q_lora_rank > 0 ? nlohmann::json(a.q_lora_rank) : nlohmann::json(nullptr)},
          {"kv_lora_rank", a.kv_lora_rank},
          {"qk_nope_head_dim", a.qk_nope_head_dim},
          {"qk_rope_head_dim", a.qk_rope_head_dim},
          {"v_head_dim", a.v_head_dim},
          {"head_dim", a.qk_rope_head_dim},
          {"n_routed_experts", e.experts},
          {"n_shared_experts", e.shared_experts},
          {"num_experts_per_tok", moe ? nlohmann::json(e.top_k) : nlohmann::json(nullptr)},
          {"first_k_dense_replace", moe ? e.first_dense_layers : c.n_layer},
          {"moe_layer_freq", 1},
          {"n_group", e.n_group},
          {"topk_group", e.topk_group},
          {"routed_scaling_factor", e.route_scale},
          {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"},
          {"norm_topk_prob", true},
          {"seq_aux", true},
          {"aux_loss_alpha", e.seq_aux_loss_coeff},
          {"hidden_act", "silu"},
          {"max_position_embeddings", c.seq_len},
          {"rms_norm_eps", c.norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", rope_scaling_json(c)},
          {"rope_interleave", false},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", c.tie_embeddings},
          {"bos_token_id", c.vocab_size - 1},
          {"eos_token_id", c.vocab_size - 1},
          {"torch_dtype", "float32"}};
}

nlohmann::json family_config_json(const ModelConfig& c) {
  if (c.llama() && c.moe.experts > 0) {
    // Qwen-MoE's names and fields: mlp.gate (the router), mlp.experts.{e}, mlp.shared_expert.
    std::vector<int64_t> dense_layers;
    for (int64_t l = 0; l < c.n_layer; ++l)
      if (!c.moe_layer(l)) dense_layers.push_back(l);
    return {{"architectures", {"Qwen3MoeForCausalLM"}},
            {"model_type", "qwen3_moe"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.d_model},
            {"intermediate_size", c.ffn()},
            {"moe_intermediate_size", c.expert_ffn()},
            {"num_experts", c.moe.experts},
            {"num_experts_per_tok", c.moe.top_k},
            {"norm_topk_prob", true},
            {"decoder_sparse_step", 1},
            {"mlp_only_layers", dense_layers},
            {"shared_expert_intermediate_size", c.moe.shared_experts * c.expert_ffn()},
            {"router_aux_loss_coef", c.moe.aux_loss_coeff},
            {"output_router_logits", false},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.kv_heads()},
            {"head_dim", c.d_model / c.n_head},
            {"hidden_act", "silu"},
            {"max_position_embeddings", c.seq_len},
            {"rms_norm_eps", c.norm_eps},
            {"rope_theta", c.rope_theta},
            {"attention_bias", false},
            {"tie_word_embeddings", c.tie_embeddings},
            {"bos_token_id", c.vocab_size - 1},
            {"eos_token_id", c.vocab_size - 1},
            {"torch_dtype", "float32"}};
  }
  if (c.llama()) {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.d_model},
            {"intermediate_size", c.ffn()},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.kv_heads()},
            {"head_dim", c.d_model / c.n_head},
            {"hidden_act", "silu"},
            {"max_position_embeddings", c.seq_len},
            {"rms_norm_eps", c.norm_eps},
            {"rope_theta", c.rope_theta},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", 0.0},
            {"initializer_range", 0.02},
            {"tie_word_embeddings", c.tie_embeddings},
            {"bos_token_id", c.vocab_size - 1},
            {"eos_token_id", c.vocab_size - 1},
            {"torch_dtype", "float32"}};
  }
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.seq_len},
          {"n_ctx", c.seq_len},
          {"n_embd", c.d_model},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"bos_token_id", c.vocab_size - 1},
          {"eos_token_id", c.vocab_size - 1},
          {"torch_dtype", "float32"}};
}

}  // namespace

}  // namespace precon::worker
