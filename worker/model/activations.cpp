#include "worker/model/activations.h"

#include <algorithm>
#include <stdexcept>

#include "worker/model/params.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;

int64_t ActBuffer::bytes() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (n * static_cast<int64_t>(k::dtype_size(dtype)) + 63) / 64 * 64;
}

int64_t plan_bytes(const ActPlan& plan) {
  int64_t total = 0;
  for (const ActBuffer& b : plan) total += b.bytes();
  return total;
}

namespace {

// Appends one buffer, or one per block of the chunk.
struct Planner {
  ActPlan plan;
  int64_t layers = 0;
  void add(const char* name, std::vector<int64_t> shape, DType dtype) { plan.push_back({name, -1, std::move(shape), dtype}); }
  void per_layer(const char* name, const std::vector<int64_t>& shape, DType dtype) {
    for (int64_t l = 0; l < layers; ++l) plan.push_back({name, l, shape, dtype});
  }
};

int64_t end_of(const ModelConfig& m, const ActShape& s) { return s.end_layer < 0 ? m.n_layer : s.end_layer; }

}  // namespace

ActPlan gpt_slot_plan(const ModelConfig& m, const ActShape& s) {
  const int64_t B = s.batch, T = m.seq_len, C = m.d_model, BT = B * T, tp = s.tensor;
  const int64_t Cl = C / tp, NHl = m.n_head / tp, Vpl = padded_vocab(m.vocab_size) / tp;
  const DType a = s.dtype;
  Planner p;
  p.layers = end_of(m, s) - s.first_layer;
  p.add("tokens", {B, T}, DType::i32);
  p.add("targets", {B, T}, DType::i32);
  p.add("encoded", {B, T, C}, a);
  p.per_layer("ln1", {B, T, C}, a);
  p.per_layer("ln1_mean", {BT}, DType::f32);
  p.per_layer("ln1_rstd", {BT}, DType::f32);
  p.per_layer("qkv", {B, T, 3 * Cl}, a);
  p.per_layer("atty", {B, T, Cl}, a);
  p.per_layer("att", {B, NHl, T, T}, a);
  p.per_layer("residual2", {B, T, C}, a);
  p.per_layer("ln2", {B, T, C}, a);
  p.per_layer("ln2_mean", {BT}, DType::f32);
  p.per_layer("ln2_rstd", {BT}, DType::f32);
  p.per_layer("fch", {B, T, 4 * Cl}, a);
  p.per_layer("fch_gelu", {B, T, 4 * Cl}, a);
  p.per_layer("output", {B, T, C}, a);
  p.add("lnf", {B, T, C}, a);
  p.add("lnf_mean", {BT}, DType::f32);
  p.add("lnf_rstd", {BT}, DType::f32);
  p.add("logits", {B, T, Vpl}, a);
  p.add("losses", {BT}, DType::f32);
  p.add("branch_out", {B, T, C}, a);
  p.add("dresidual", {B, T, C}, a);
  p.add("dln", {B, T, C}, a);
  p.add("datty", {B, T, Cl}, a);
  p.add("dfch_gelu", {B, T, 4 * Cl}, a);
  p.add("dfch", {B, T, 4 * Cl}, a);
  p.add("dqkv", {B, T, 3 * Cl}, a);
  p.add("datt", {B, NHl, T, T}, a);
  return p.plan;
}

ActPlan llama_slot_plan(const ModelConfig& m, const ActShape& s) {
  const int64_t B = s.batch, T = m.seq_len, C = m.d_model, BT = B * T, tp = s.tensor;
  const int64_t hd = C / m.n_head, NHl = m.n_head / tp, Ql = NHl * hd, KVl = m.kv_heads() / tp * hd;
  const int64_t Fl = m.ffn() / tp, Vpl = padded_vocab(m.vocab_size) / tp;
  const DType a = s.dtype;
  Planner p;
  // The chunk with the head computes the multi-token prediction modules' blocks after its own.
  const int64_t D = end_of(m, s) == m.n_layer ? m.mtp_layers : 0;
  p.layers = end_of(m, s) - s.first_layer + D;
  p.add("tokens", {B, T}, DType::i32);
  p.add("targets", {B, T}, DType::i32);
  p.add("encoded", {B, T, C}, a);
  p.per_layer("ln1", {B, T, C}, a);
  p.per_layer("rstd1", {BT}, DType::f32);
  // Multi-head latent attention packs each head to H channels; its latents are (B, T, rank).
  const bool mla = m.uses_mla();
  const int64_t Rq = m.mla.q_lora_rank, R = m.mla.kv_lora_rank, dn = m.mla.qk_nope_head_dim;
  const int64_t dr = m.mla.qk_rope_head_dim, dv = m.mla.v_head_dim, H = std::max(dn + dr, dv);
  const int64_t A = mla ? NHl * H : Ql;  // the attention's width (per q, k and v)
  p.per_layer("qkv", {B, T, 3 * A}, a);
  p.per_layer("atty", {B, T, A}, a);
  p.per_layer("att", {B, NHl, T, T}, a);
  if (mla) {
    p.per_layer("mla_cq", {B, T, Rq}, a);
    p.per_layer("mla_cqn", {B, T, Rq}, a);
    p.per_layer("mla_rstdq", {Rq > 0 ? BT : 0}, DType::f32);
    p.per_layer("mla_ckv", {B, T, R}, a);
    p.per_layer("mla_ckvn", {B, T, R}, a);
    p.per_layer("mla_rstdkv", {BT}, DType::f32);
    p.per_layer("mla_attv", {B, T, NHl * dv}, a);
  }
  p.per_layer("residual2", {B, T, C}, a);
  p.per_layer("ln2", {B, T, C}, a);
  p.per_layer("rstd2", {BT}, DType::f32);
  // The dense MLP's activations (empty in a mixture-of-experts layer: its plans are its own).
  for (int64_t l = 0; l < p.layers; ++l) {
    const int64_t width = m.moe_layer(s.first_layer + l) ? 0 : Fl;
    for (const char* name : {"gate", "up", "h"}) p.plan.push_back({name, l, {B, T, width}, a});
  }
  p.per_layer("output", {B, T, C}, a);
  p.add("lnf", {B, T, C}, a);
  p.add("rstdf", {BT}, DType::f32);
  p.add("logits", {B, T, Vpl}, a);
  p.add("losses", {BT}, DType::f32);
  if (mla) {
    p.add("mla_q", {B, T, NHl * (dn + dr)}, a);
    p.add("mla_kv", {B, T, NHl * (dn + dv)}, a);
    p.add("mla_kva", {B, T, R + dr}, a);
    p.add("mla_qpe", {B, T, NHl * dr}, a);
    p.add("mla_kpe", {B, T, dr}, a);
  } else {
    p.add("q", {B, T, Ql}, a);
    p.add("kk", {B, T, KVl}, a);
    p.add("v", {B, T, KVl}, a);
  }
  p.add("branch_out", {B, T, C}, a);
  p.add("dresidual", {B, T, C}, a);
  p.add("dln", {B, T, C}, a);
  p.add("datty", {B, T, A}, a);
  p.add("dh", {B, T, Fl}, a);
  p.add("dgate", {B, T, Fl}, a);
  p.add("dup", {B, T, Fl}, a);
  p.add("dqkv", {B, T, 3 * A}, a);
  if (mla) {
    p.add("dq", {B, T, NHl * (dn + dr)}, a);
    p.add("mla_dattv", {B, T, NHl * dv}, a);
    p.add("mla_dqpe", {B, T, NHl * dr}, a);
    p.add("mla_dkv", {B, T, NHl * (dn + dv)}, a);
    p.add("mla_dkpe", {B, T, dr}, a);
    p.add("mla_dkva", {B, T, R + dr}, a);
    p.add("mla_dckv", {B, T, R}, a);
    p.add("mla_dckvn", {B, T, R}, a);
    p.add("mla_dcq", {B, T, Rq}, a);
    p.add("mla_dcqn", {B, T, Rq}, a);
  } else {
    p.add("dq", {B, T, Ql}, a);
    p.add("dk", {B, T, KVl}, a);
    p.add("dv", {B, T, KVl}, a);
  }
  p.add("datt", {B, NHl, T, T}, a);
  // Each MTP module's: its shifted tokens and targets, the embedding, the two norms' statistics,
  // [enorm(embedding) | hnorm(hidden)], its projection (the block's input), the head's norm, logits
  // and losses; then the modules' backward scratch.
  for (int64_t k = 0; k < D; ++k) {
    p.plan.push_back({"mtp_tokens", k, {B, T}, DType::i32});
    p.plan.push_back({"mtp_targets", k, {B, T}, DType::i32});
    p.plan.push_back({"mtp_emb", k, {B, T, C}, a});
    p.plan.push_back({"mtp_rstde", k, {BT}, DType::f32});
    p.plan.push_back({"mtp_rstdh", k, {BT}, DType::f32});
    p.plan.push_back({"mtp_cat", k, {B, T, 2 * C}, a});
    p.plan.push_back({"mtp_x", k, {B, T, C}, a});
    p.plan.push_back({"mtp_lnf", k, {B, T, C}, a});
    p.plan.push_back({"mtp_rstdf", k, {BT}, DType::f32});
    p.plan.push_back({"mtp_logits", k, {B, T, Vpl}, a});
    p.plan.push_back({"mtp_losses", k, {BT}, DType::f32});
  }
  if (D > 0) {
    p.add("mtp_dh", {B, T, C}, a);
    p.add("mtp_dcat", {B, T, 2 * C}, a);
    p.add("mtp_part", {B, T, C}, a);
    p.add("mtp_demb", {B, T, C}, a);
  }
  return p.plan;
}

MoeDims moe_dims(const ModelConfig& m, const ActShape& s, bool expert_parallel) {
  MoeDims d;
  d.tokens = s.batch * m.seq_len;
  d.channels = m.d_model;
  d.experts = m.moe.experts;
  d.top_k = m.moe.top_k;
  d.expert_width = m.expert_ffn() / s.tensor;
  d.shared_width = m.moe.shared_experts * m.expert_ffn() / s.tensor;
  d.dtype = s.dtype;
  d.expert_parallel = expert_parallel;
  return d;
}

ActPlan moe_acts_plan(const MoeDims& d) {
  const int64_t N = d.tokens, C = d.channels, E = d.experts, K = d.top_k, M = N * K;
  Planner p;
  if (d.dtype != DType::f32) p.add("x32", {N, C}, DType::f32);
  p.add("logits", {N, E}, DType::f32);
  p.add("probs", {N, E}, DType::f32);
  p.add("idx", {N, K}, DType::i32);
  p.add("weights", {N, K}, DType::f32);
  p.add("pos", {N, K}, DType::i32);
  p.add("rows", {M}, DType::i32);
  p.add("aux_dprobs", {E}, DType::f32);
  p.add("xs", {M, C}, d.dtype);
  p.add("ys", {M, C}, d.dtype);
  if (d.shared_width > 0) {
    p.add("shared_gate", {N, d.shared_width}, d.dtype);
    p.add("shared_up", {N, d.shared_width}, d.dtype);
    p.add("shared_h", {N, d.shared_width}, d.dtype);
    p.add("shared_out", {N, C}, d.dtype);
  }
  return p.plan;
}

ActPlan moe_scratch_plan(const MoeDims& d) {
  const int64_t N = d.tokens, C = d.channels, E = d.experts, K = d.top_k, M = N * K;
  Planner p;
  p.add("dys", {M, C}, d.dtype);
  p.add("dxs", {M, C}, d.dtype);
  p.add("dw", {N, K}, DType::f32);
  p.add("dlogits", {N, E}, DType::f32);
  p.add("dx32", {N, C}, DType::f32);
  if (d.dtype != DType::f32) p.add("dx", {N, C}, d.dtype);
  if (d.shared_width > 0) {
    p.add("shared_dh", {N, d.shared_width}, d.dtype);
    p.add("shared_dgate", {N, d.shared_width}, d.dtype);
    p.add("shared_dup", {N, d.shared_width}, d.dtype);
  }
  return p.plan;
}

ActPlan moe_rows_plan(const MoeDims& d, int64_t rows) {
  const int64_t R = std::max<int64_t>(rows, 1), C = d.channels, F = d.expert_width;
  Planner p;
  if (d.expert_parallel) {
    p.add("xr", {R, C}, d.dtype);
    p.add("yr", {R, C}, d.dtype);
    p.add("order", {R}, DType::i32);
    p.add("inv", {R}, DType::i32);
    p.add("x", {R, C}, d.dtype);
    p.add("y", {R, C}, d.dtype);
  }
  p.add("gate", {R, F}, d.dtype);
  p.add("up", {R, F}, d.dtype);
  p.add("h", {R, F}, d.dtype);
  return p.plan;
}

ActPlan moe_scratch_rows_plan(const MoeDims& d, int64_t rows) {
  const int64_t R = std::max<int64_t>(rows, 1), C = d.channels, F = d.expert_width;
  Planner p;
  if (d.expert_parallel) {
    p.add("dyr", {R, C}, d.dtype);
    p.add("dxr", {R, C}, d.dtype);
    p.add("dy", {R, C}, d.dtype);
    p.add("dx_rows", {R, C}, d.dtype);
  }
  p.add("dh", {R, F}, d.dtype);
  p.add("dgate", {R, F}, d.dtype);
  p.add("dup", {R, F}, d.dtype);
  return p.plan;
}

int64_t chunk_activation_bytes(const ModelConfig& m, const ActShape& s, int slots, bool expert_parallel, bool qk_clip) {
  // The MoE buffers are carved by ActTargets::allocate with at least 64 bytes each.
  auto carved = [](const ActPlan& plan) { return std::max<int64_t>(plan_bytes(plan), 64); };
  int64_t slot = plan_bytes(m.llama() ? llama_slot_plan(m, s) : gpt_slot_plan(m, s)), total = 0;
  const MoeDims d = moe_dims(m, s, expert_parallel);
  const int64_t rows = d.tokens * d.top_k;
  if (m.llama() && m.moe.experts > 0) {
    const int64_t end = end_of(m, s) == m.n_layer ? m.blocks() : end_of(m, s);  // with the MTP modules' blocks
    for (int64_t l = s.first_layer; l < end; ++l)
      if (m.moe_layer(l)) slot += carved(moe_acts_plan(d)) + carved(moe_rows_plan(d, rows));
    total += carved(moe_scratch_plan(d)) + carved(moe_scratch_rows_plan(d, rows));
  }
  total += slot * slots;
  if (qk_clip) total += s.batch * (m.n_head / s.tensor) * m.seq_len * static_cast<int64_t>(sizeof(float));
  return total;
}

ActTargets& ActTargets::one(const std::string& name, k::Tensor& t) {
  one_.emplace_back(name, &t);
  return *this;
}

ActTargets& ActTargets::layers(const std::string& name, std::vector<k::Tensor>& v) {
  layers_.emplace_back(name, &v);
  return *this;
}

k::Buffer ActTargets::allocate(const ActPlan& plan, k::Device device, int64_t min_bytes) const {
  // Every per-layer vector is sized before any pointer into it is taken.
  for (const ActBuffer& b : plan)
    if (b.layer >= 0)
      for (const auto& [name, v] : layers_)
        if (name == b.name && v->size() <= static_cast<size_t>(b.layer)) v->resize(static_cast<size_t>(b.layer) + 1);
  std::vector<k::Tensor*> targets;
  for (const ActBuffer& b : plan) {
    k::Tensor* t = nullptr;
    if (b.layer < 0) {
      for (const auto& [name, p] : one_)
        if (name == b.name) t = p;
    } else {
      for (const auto& [name, v] : layers_)
        if (name == b.name) t = &(*v)[static_cast<size_t>(b.layer)];
    }
    if (!t) throw std::logic_error("activation plan: no tensor for " + b.name);
    targets.push_back(t);
  }
  k::Buffer buf(device, static_cast<size_t>(std::max(plan_bytes(plan), min_bytes)));
  int64_t offset = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::vector<int64_t>& s = plan[i].shape;
    char* base = static_cast<char*>(buf.data()) + offset;
    const DType dt = plan[i].dtype;
    if (s.size() == 1) *targets[i] = k::Tensor::view(base, {s[0]}, dt, device);
    else if (s.size() == 2) *targets[i] = k::Tensor::view(base, {s[0], s[1]}, dt, device);
    else if (s.size() == 3) *targets[i] = k::Tensor::view(base, {s[0], s[1], s[2]}, dt, device);
    else *targets[i] = k::Tensor::view(base, {s[0], s[1], s[2], s[3]}, dt, device);
    offset += plan[i].bytes();
  }
  return buf;
}

}  // namespace precon::worker
