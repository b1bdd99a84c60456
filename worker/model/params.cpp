#include "worker/model/params.h"

#include <algorithm>
#include <stdexcept>

namespace precon::worker {

using kernels::Tensor;

const char* param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::embedding: return "embedding";
    case ParamKind::position: return "position";
    case ParamKind::norm: return "norm";
    case ParamKind::bias: return "bias";
    case ParamKind::matrix: return "matrix";
    case ParamKind::router: return "router";
    case ParamKind::buffer: return "buffer";
  }
  return "?";
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t ParamSpec::storage_numel() const {
  return storage_rows > 0 ? numel() / shape[0] * storage_rows : numel();
}

int64_t padded_vocab(int64_t vocab_size) { return (vocab_size + 63) / 64 * 64; }

std::vector<ParamSpec> gpt2_param_table(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size;
  std::vector<ParamSpec> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamKind kind, int tp_split_dim) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.kind = kind;
    p.tp_split_dim = tp_split_dim;
    t.push_back(p);
    return &t.back();
  };
  // Conv1D weight stored (in, out). Column-parallel layers split the output dim, row-parallel
  // layers the input dim (Megatron).
  auto linear = [&](const std::string& prefix, int64_t in, int64_t out, bool column_parallel, int qkv) {
    ParamSpec* w = add(prefix + ".weight", {in, out}, ParamKind::matrix, column_parallel ? 1 : 0);
    w->fan_in = in;
    w->fan_out = out;
    w->stored_in_out = true;
    w->qkv_blocks = qkv;
    add(prefix + ".bias", {out}, ParamKind::bias, column_parallel ? 0 : -1)->qkv_blocks = qkv;
  };
  ParamSpec* wte = add("wte.weight", {V, C}, ParamKind::embedding, 0);
  wte->storage_rows = padded_vocab(V);
  wte->embedding_end = wte->head_end = true;
  add("wpe.weight", {m.seq_len, C}, ParamKind::position, -1)->embedding_end = true;
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const size_t first = t.size();
    const std::string h = "h." + std::to_string(l);
    add(h + ".ln_1.weight", {C}, ParamKind::norm, -1);
    add(h + ".ln_1.bias", {C}, ParamKind::norm, -1);
    linear(h + ".attn.c_attn", C, 3 * C, true, 3);
    t[t.size() - 2].heads = m.n_head;
    linear(h + ".attn.c_proj", C, C, false, 1);
    t[t.size() - 2].heads = m.n_head;
    t[t.size() - 2].heads_on_fan_in = true;
    add(h + ".ln_2.weight", {C}, ParamKind::norm, -1);
    add(h + ".ln_2.bias", {C}, ParamKind::norm, -1);
    linear(h + ".mlp.c_fc", C, 4 * C, true, 1);
    linear(h + ".mlp.c_proj", 4 * C, C, false, 1);
    for (size_t i = first; i < t.size(); ++i) t[i].layer = l;
  }
  add("ln_f.weight", {C}, ParamKind::norm, -1)->head_end = true;
  add("ln_f.bias", {C}, ParamKind::norm, -1)->head_end = true;
  return t;
}

std::vector<ParamSpec> llama_param_table(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size, hd = m.d_model / m.n_head;
  const int64_t q = m.n_head * hd, kv = m.kv_heads() * hd, F = m.ffn();
  std::vector<ParamSpec> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamKind kind, int tp_split_dim, int64_t layer) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.kind = kind;
    p.tp_split_dim = tp_split_dim;
    p.layer = layer;
    t.push_back(p);
    return &t.back();
  };
  // nn.Linear weight stored (out, in): column-parallel layers split dim 0, row-parallel dim 1.
  auto linear = [&](const std::string& name, int64_t in, int64_t out, bool column_parallel, int64_t layer) {
    ParamSpec* w = add(name, {out, in}, ParamKind::matrix, column_parallel ? 0 : 1, layer);
    w->fan_in = in;
    w->fan_out = out;
  };
  // The last row added is an attention matrix of `heads` heads (along fan_in: its input is theirs).
  auto by_heads = [&](int64_t heads, bool on_fan_in = false) {
    t.back().heads = heads;
    t.back().heads_on_fan_in = on_fan_in;
  };
  ParamSpec* embed = add("model.embed_tokens.weight", {V, C}, ParamKind::embedding, 0, -1);
  embed->storage_rows = padded_vocab(V);
  embed->embedding_end = true;
  // The stage with the head holds the embedding too when it is the head or the MTP modules read it
  // (a pipeline sums its gradient between the first and the last stage: tied_embedding_row).
  embed->head_end = m.tie_embeddings || m.mtp_layers > 0;
  // Block l's rows (a multi-token prediction module's block too, after its own rows).
  auto block = [&](int64_t l) {
    const std::string h = "model.layers." + std::to_string(l);
    add(h + ".input_layernorm.weight", {C}, ParamKind::norm, -1, l);
    if (m.uses_mla()) {
      // DeepseekV3Attention's order; the latent projections and their norms replicated, q_b (or q_proj)
      // and kv_b split by heads, o_proj by its input heads.
      const MlaConfig& a = m.mla;
      const int64_t NH = m.n_head, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
      const std::string s = h + ".self_attn.";
      if (a.q_lora_rank > 0) {
        linear(s + "q_a_proj.weight", C, a.q_lora_rank, true, l);
        t.back().tp_split_dim = -1;
        add(s + "q_a_layernorm.weight", {a.q_lora_rank}, ParamKind::norm, -1, l);
        linear(s + "q_b_proj.weight", a.q_lora_rank, NH * qk, true, l);
      } else {
        linear(s + "q_proj.weight", C, NH * qk, true, l);
      }
      by_heads(NH);
      linear(s + "kv_a_proj_with_mqa.weight", C, a.kv_lora_rank + a.qk_rope_head_dim, true, l);
      t.back().tp_split_dim = -1;
      add(s + "kv_a_layernorm.weight", {a.kv_lora_rank}, ParamKind::norm, -1, l);
      linear(s + "kv_b_proj.weight", a.kv_lora_rank, NH * (a.qk_nope_head_dim + a.v_head_dim), true, l);
      by_heads(NH);
      linear(s + "o_proj.weight", NH * a.v_head_dim, C, false, l);
      by_heads(NH, true);
    } else {
      linear(h + ".self_attn.q_proj.weight", C, q, true, l);
      by_heads(m.n_head);
      linear(h + ".self_attn.k_proj.weight", C, kv, true, l);
      by_heads(m.kv_heads());
      linear(h + ".self_attn.v_proj.weight", C, kv, true, l);
      by_heads(m.kv_heads());
      linear(h + ".self_attn.o_proj.weight", q, C, false, l);
      by_heads(m.n_head, true);
    }
    add(h + ".post_attention_layernorm.weight", {C}, ParamKind::norm, -1, l);
    auto swiglu = [&](const std::string& mlp, int64_t width, int64_t expert = -1) {
      linear(mlp + ".gate_proj.weight", C, width, true, l);
      linear(mlp + ".up_proj.weight", C, width, true, l);
      linear(mlp + ".down_proj.weight", width, C, false, l);
      for (size_t i = t.size() - 3; i < t.size(); ++i) {
        t[i].expert = expert;
        t[i].experts = expert >= 0 ? m.moe.experts : 0;
      }
    };
    if (!m.moe_layer(l)) {
      swiglu(h + ".mlp", F);
      return;
    }
    ParamSpec* router = add(h + ".mlp.gate.weight", {m.moe.experts, C}, ParamKind::router, -1, l);
    router->fan_in = C;
    router->fan_out = m.moe.experts;
    if (m.moe.sigmoid()) add(h + ".mlp.gate.e_score_correction_bias", {m.moe.experts}, ParamKind::buffer, -1, l);
    for (int64_t e = 0; e < m.moe.experts; ++e) swiglu(h + ".mlp.experts." + std::to_string(e), m.expert_ffn(), e);
    if (m.moe.shared_experts > 0) swiglu(h + "." + shared_expert_prefix(m), m.moe.shared_experts * m.expert_ffn());
  };
  for (int64_t l = 0; l < m.n_layer; ++l) block(l);
  add("model.norm.weight", {C}, ParamKind::norm, -1, -1)->head_end = true;
  if (!m.tie_embeddings) {
    ParamSpec* head = add("lm_head.weight", {V, C}, ParamKind::embedding, 0, -1);
    head->storage_rows = padded_vocab(V);
    head->head_end = true;
  }
  // Multi-token prediction module k as DeepseekV3 stores it at layer n_layer + k − 1: the norms of
  // the embedding and of the hidden state, their projection eh_proj (C, 2C) of [embedding | hidden]
  // (replicated under tensor parallelism), the block, the norm before the shared head.
  for (int64_t l = m.n_layer; l < m.blocks(); ++l) {
    const std::string h = "model.layers." + std::to_string(l);
    add(h + ".enorm.weight", {C}, ParamKind::norm, -1, l);
    add(h + ".hnorm.weight", {C}, ParamKind::norm, -1, l);
    linear(h + ".eh_proj.weight", 2 * C, C, true, l);
    t.back().tp_split_dim = -1;
    block(l);
    add(h + ".shared_head.norm.weight", {C}, ParamKind::norm, -1, l);
  }
  return t;
}

std::string shared_expert_prefix(const ModelConfig& config) {
  return config.deepseek_v3() ? "mlp.shared_experts" : "mlp.shared_expert";
}

std::vector<ParamSpec> model_param_table(const ModelConfig& config) {
  return config.llama() ? llama_param_table(config) : gpt2_param_table(config);
}

std::vector<size_t> stage_rows(const std::vector<ParamSpec>& table, const ModelStage& stage) {
  std::vector<size_t> rows;
  for (size_t i = 0; i < table.size(); ++i) {
    const ParamSpec& p = table[i];
    // The stage with the head also holds the blocks after its own: the MTP modules'.
    const bool mine = p.layer >= 0 ? p.layer >= stage.first_layer && (stage.end_layer < 0 || p.layer < stage.end_layer ||
                                                                     stage.head)
                                   : (p.embedding_end && stage.embedding) || (p.head_end && stage.head);
    const bool my_expert = p.expert < 0 || expert_holder(p, stage.expert_ranks) == stage.expert_rank;
    if (mine && my_expert) rows.push_back(i);
  }
  return rows;
}

std::vector<int64_t> stage_layer_counts(const ParallelConfig& layout, int64_t n_layer) {
  if (!layout.pipeline_layers.empty()) return layout.pipeline_layers;
  const int64_t p = layout.pipeline * layout.virtual_stages;
  std::vector<int64_t> counts(static_cast<size_t>(p), n_layer / p);
  for (int64_t s = 0; s < n_layer % p; ++s) ++counts[static_cast<size_t>(s)];
  return counts;
}

ModelStage pipeline_stage(const std::vector<int64_t>& counts, size_t s) {
  ModelStage stage;
  for (size_t i = 0; i < s; ++i) stage.first_layer += counts[i];
  stage.end_layer = stage.first_layer + counts[s];
  stage.embedding = s == 0;
  stage.head = s + 1 == counts.size();
  return stage;
}

std::vector<size_t> pipeline_rank_table_rows(const std::vector<ParamSpec>& table, const ParallelConfig& layout,
                                             int64_t n_layer, int p, int expert_rank) {
  const std::vector<int64_t> counts = stage_layer_counts(layout, n_layer);
  std::vector<bool> held(table.size(), false);
  for (size_t s = static_cast<size_t>(p); s < counts.size(); s += static_cast<size_t>(layout.pipeline)) {
    ModelStage stage = pipeline_stage(counts, s);
    stage.expert_rank = expert_rank;
    stage.expert_ranks = static_cast<int>(layout.expert);
    for (size_t i : stage_rows(table, stage)) held[i] = true;
  }
  std::vector<size_t> rows;
  for (size_t i = 0; i < table.size(); ++i)
    if (held[i]) rows.push_back(i);
  return rows;
}

int expert_holder(const ParamSpec& spec, int ranks) {
  if (spec.expert < 0 || ranks <= 1) return 0;
  return static_cast<int>(spec.expert / (spec.experts / ranks));
}

size_t tied_embedding_row(const std::vector<ParamSpec>& table) {
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].embedding_end && table[i].head_end) return i;
  return table.size();
}

ParamSpec tp_part_spec(const ParamSpec& full, int size, int rank) {
  ParamSpec s = full;
  if (full.tp_split_dim < 0 || size == 1) return s;
  if (full.storage_rows > 0) {  // wte: the padded storage's rows, of which the real vocabulary's are visible
    s.storage_rows = full.storage_rows / size;
    s.shape[0] = std::clamp<int64_t>(full.shape[0] - rank * s.storage_rows, 0, s.storage_rows);
  } else {
    s.shape[static_cast<size_t>(full.tp_split_dim)] /= size;
  }
  if (s.kind == ParamKind::matrix) {
    s.fan_in = s.stored_in_out ? s.shape[0] : s.shape[1];
    s.fan_out = s.stored_in_out ? s.shape[1] : s.shape[0];
    const int heads_dim = s.stored_in_out == s.heads_on_fan_in ? 0 : 1;
    if (full.tp_split_dim == heads_dim) s.heads /= size;  // this rank's heads
  }
  return s;
}

void copy_tp_part(const ParamSpec& full, float* full_data, float* part_data, int rank, int size, bool into_part) {
  auto move = [&](float* f, float* sh, int64_t n) {
    if (into_part) std::copy(f, f + n, sh);
    else std::copy(sh, sh + n, f);
  };
  if (full.tp_split_dim < 0 || size == 1) {
    move(full_data, part_data, full.storage_numel());
    return;
  }
  const int64_t rows = full.storage_rows > 0 ? full.storage_rows : full.shape[0];
  const int64_t cols = full.shape.size() == 2 ? full.shape[1] : 1;
  const int64_t blocks = std::max(1, full.qkv_blocks);
  if (full.tp_split_dim == 0) {  // whole rows (a 1-D tensor is rows of one column)
    const int64_t block = rows / blocks, piece = block / size;
    for (int64_t b = 0; b < blocks; ++b)
      move(full_data + (b * block + rank * piece) * cols, part_data + b * piece * cols, piece * cols);
    return;
  }
  const int64_t block = cols / blocks, piece = block / size, part_cols = blocks * piece;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b)
      move(full_data + r * cols + b * block + rank * piece, part_data + r * part_cols + b * piece, piece);
}

void copy_part_from_full(const ParamSpec& full, const float* full_data, Tensor part, TpPlace tp) {
  if (part.device == kernels::Device::cpu && part.contiguous()) {
    copy_tp_part(full, const_cast<float*>(full_data), part.f32(), tp.rank, tp.size, true);
    return;
  }
  std::vector<float> host(static_cast<size_t>(part.numel()));
  copy_tp_part(full, const_cast<float*>(full_data), host.data(), tp.rank, tp.size, true);
  Tensor src = part;
  src.data = host.data();
  src.device = kernels::Device::cpu;
  kernels::copy(part, src);
}

void copy_part_to_full(const ParamSpec& full, float* full_data, const Tensor& part, TpPlace tp) {
  if (part.device == kernels::Device::cpu && part.contiguous()) {
    copy_tp_part(full, full_data, part.f32(), tp.rank, tp.size, false);
    return;
  }
  std::vector<float> host(static_cast<size_t>(part.numel()));
  Tensor dst = part;
  dst.data = host.data();
  dst.device = kernels::Device::cpu;
  kernels::copy(dst, part);
  copy_tp_part(full, full_data, host.data(), tp.rank, tp.size, false);
}

namespace {
Tensor storage_view(void* base, int64_t offset, const ParamSpec& p, kernels::Device device) {
  float* ptr = static_cast<float*>(base) + offset;
  if (p.shape.size() == 1) return Tensor::view(ptr, {p.shape[0]}, kernels::DType::f32, device);
  const int64_t rows = p.storage_rows > 0 ? p.storage_rows : p.shape[0];
  return Tensor::view(ptr, {rows, p.shape[1]}, kernels::DType::f32, device);
}
}  // namespace

ParamStore::ParamStore(std::vector<ParamSpec> table, kernels::Device device, std::vector<size_t> resident,
                       TpPlace tp)
    : table_(std::move(table)), tp_(tp), resident_(table_.size(), resident.empty()) {
  if (tp_.size < 1 || tp_.rank < 0 || tp_.rank >= tp_.size)
    throw std::invalid_argument("parameter store: tensor-parallel rank " + std::to_string(tp_.rank) + " of " +
                                std::to_string(tp_.size));
  for (const ParamSpec& spec : table_) parts_.push_back(tp_part_spec(spec, tp_.size, tp_.rank));
  for (size_t i : resident) resident_.at(i) = true;
  for (size_t i = 0; i < table_.size(); ++i)
    if (resident_[i]) total_ += parts_[i].storage_numel();
  param_buf_ = kernels::Buffer(device, total_ * sizeof(float));
  grad_buf_ = kernels::Buffer(device, total_ * sizeof(float));
  int64_t offset = 0;
  for (size_t i = 0; i < table_.size(); ++i) {
    const ParamSpec& p = parts_[i];
    if (!resident_[i]) {  // no memory: an empty view where the row would start
      params_.push_back(Tensor::view(static_cast<float*>(param_buf_.data()) + offset, {0}, kernels::DType::f32, device));
      grads_.push_back(Tensor::view(static_cast<float*>(grad_buf_.data()) + offset, {0}, kernels::DType::f32, device));
      continue;
    }
    params_.push_back(storage_view(param_buf_.data(), offset, p, device));
    grads_.push_back(storage_view(grad_buf_.data(), offset, p, device));
    offset += p.storage_numel();
  }
  kernels::fill_zero(all_params());
  zero_grads();
}

Tensor ParamStore::visible_param(size_t i) const {
  const ParamSpec& p = parts_[i];
  return p.storage_rows > 0 && resident_[i] ? params_[i].narrow(0, 0, p.shape[0]) : params_[i];
}

size_t ParamStore::index(const std::string& name) const {
  for (size_t i = 0; i < table_.size(); ++i)
    if (table_[i].name == name) return i;
  throw std::out_of_range("no parameter named " + name);
}

Tensor ParamStore::param(const std::string& name) const { return params_[index(name)]; }
Tensor ParamStore::grad(const std::string& name) const { return grads_[index(name)]; }

Tensor ParamStore::all_params() const { return param_buf_.view({total_}); }
Tensor ParamStore::all_grads() const { return grad_buf_.view({total_}); }

void ParamStore::zero_grads() { kernels::fill_zero(all_grads()); }

}  // namespace precon::worker
