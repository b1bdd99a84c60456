#include "worker/model/llama.h"

#include <cmath>
#include <stdexcept>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/model/activations.h"
#include "worker/model/rope_scaling.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;
using k::Tensor;

struct Llama::Acts : Model::Acts {
  std::vector<Tensor> ln1, rstd1, qkv, atty, att, residual2, ln2, rstd2, gate, up, h;
  std::vector<MoeMlp::Acts> moe;  // per layer (empty for a dense one)
  // Multi-head latent attention's, per layer, and its slot scratch.
  std::vector<Tensor> cq, cqn, rstdq, ckv, ckvn, rstdkv, attv;
  MlaScratch mla;
  MlaLayerActs mla_layer(size_t i) const {
    return {cq[i], cqn[i], rstdq[i], ckv[i], ckvn[i], rstdkv[i], qkv[i], atty[i], att[i], attv[i]};
  }
  Tensor lnf, rstdf;
  Tensor q, kk, v;    // (B, T, Ql) and (B, T, KVl): one block's projections before they are packed
  Tensor branch_out;  // (B, T, C) a residual branch's output before it joins the stream
  // Backward scratch, each zeroed before the kernel that accumulates into it.
  Tensor dln, datty, dh, dgate, dup, dqkv, dq, dk, dv, datt;
  // The multi-token prediction modules', per module (Llama::mtp_forward), and their scratch.
  std::vector<Tensor> mtp_tokens, mtp_targets, mtp_emb, mtp_rstde, mtp_rstdh, mtp_cat, mtp_x, mtp_lnf, mtp_rstdf;
  std::vector<Tensor> mtp_logits, mtp_losses;
  std::vector<std::vector<int32_t>> mtp_tokens_host, mtp_targets_host;
  Tensor mtp_dh, mtp_dcat, mtp_part, mtp_demb;
  int64_t other_bytes() const override {
    int64_t bytes = 0;
    for (const MoeMlp::Acts& m : moe) bytes += static_cast<int64_t>(m.buf.bytes() + m.ex.buf.bytes());
    return bytes;
  }
};

Llama::Llama(const ModelConfig& config, int64_t batch_size, k::Device device, const std::string& precision,
             TpGroup tp, const ModelStage& stage, ParamStore* shared, TpGroup ep)
    : Model(config, llama_param_table(config), batch_size, device, precision, tp, stage, shared),
      hd_(C_ / NH_), Ql_(NHl_ * hd_), KVl_(config.kv_heads() / tp_.size() * hd_), NKVl_(config.kv_heads() / tp_.size()),
      Fl_(config.ffn() / tp_.size()), embed_(params().index("model.embed_tokens.weight")),
      norm_(params().index("model.norm.weight")),
      head_row_(config.tie_embeddings ? embed_ : params().index("lm_head.weight")),
      embedding_(tp_, embed_), head_(tp_, {head_row_}, {}, k::WeightLayout::out_in) {
  const ParamStore& p = params();
  const auto out_in = k::WeightLayout::out_in;
  // The MTP modules' blocks follow the model's on the chunk with the head.
  const int64_t blocks = stage_.head ? config.blocks() : L_;
  for (int64_t l = 0; l < blocks; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    auto row = [&](const char* name) { return p.index(h + name); };
    if (l >= L_) {
      mtp_.push_back({row("enorm.weight"), row("hnorm.weight"), row("eh_proj.weight"), row("shared_head.norm.weight"), {}});
      mtp_.back().rows = row_range({mtp_.back().enorm, mtp_.back().norm});
    }
    blocks_.push_back({row("input_layernorm.weight"), row("post_attention_layernorm.weight"), {}, {}, {}, {}, {}, {}, {}});
    Block& b = blocks_.back();
    if (config.uses_mla()) {
      const MlaConfig& m = config.mla;
      MlaRows r;
      if (m.q_lora_rank > 0) {
        r.q_a = row("self_attn.q_a_proj.weight");
        r.q_norm = row("self_attn.q_a_layernorm.weight");
        r.q = row("self_attn.q_b_proj.weight");
      } else {
        r.q = row("self_attn.q_proj.weight");
      }
      r.kv_a = row("self_attn.kv_a_proj_with_mqa.weight");
      r.kv_norm = row("self_attn.kv_a_layernorm.weight");
      r.kv_b = row("self_attn.kv_b_proj.weight");
      r.o = row("self_attn.o_proj.weight");
      b.mla.emplace(tp_, r, mla_dims(), model_rope(config), yarn_softmax_factor(config),
                    static_cast<float>(config.norm_eps));
    } else {
      b.qkv.emplace(tp_,
                    std::vector<size_t>{row("self_attn.q_proj.weight"), row("self_attn.k_proj.weight"),
                                        row("self_attn.v_proj.weight")},
                    std::vector<size_t>{}, out_in);
      b.o.emplace(tp_, row("self_attn.o_proj.weight"), kNoRow, out_in);
    }
    if (!config.moe_layer(l)) {
      b.gate_up.emplace(tp_, std::vector<size_t>{row("mlp.gate_proj.weight"), row("mlp.up_proj.weight")},
                        std::vector<size_t>{}, out_in);
      b.down.emplace(tp_, row("mlp.down_proj.weight"), kNoRow, out_in);
      b.rows = row_range({b.input_norm, row("mlp.down_proj.weight")});
      continue;
    }
    MoeMlp::Rows r;
    r.router = row("mlp.gate.weight");
    if (config.moe.sigmoid()) r.bias = row("mlp.gate.e_score_correction_bias");
    for (int64_t e = 0; e < config.moe.experts; ++e) {
      const std::string x = "mlp.experts." + std::to_string(e) + ".";
      r.gate.push_back(row((x + "gate_proj.weight").c_str()));
      r.up.push_back(row((x + "up_proj.weight").c_str()));
      r.down.push_back(row((x + "down_proj.weight").c_str()));
    }
    size_t end = r.down.back();
    if (config.moe.shared_experts > 0) {
      const std::string x = shared_expert_prefix(config) + ".";
      r.shared_gate = row((x + "gate_proj.weight").c_str());
      r.shared_up = row((x + "up_proj.weight").c_str());
      r.shared_down = end = row((x + "down_proj.weight").c_str());
    }
    b.moe.emplace(tp_, ep, std::move(r), MoeMlp::routing_of(config.moe));
    b.rows = row_range({b.input_norm, end});
  }
  if (ep.parallel() && (device != k::Device::cpu || act_ != DType::f32))
    throw std::invalid_argument("expert parallelism runs on the CPU in fp32 in this precon-train");
  if (config.moe.experts > 0) moe_scratch_ = blocks_.back().moe->make_scratch(moe_shape());
  allocate_slots([this] { return allocate_acts(); });
}

int64_t Llama::family_activation_bytes() const {
  return static_cast<int64_t>(moe_scratch_.buf.bytes() + moe_scratch_.expert_buf.bytes());
}

double Llama::moe_alltoall_seconds() const {
  double t = 0;
  for (const Block& b : blocks_)
    if (b.moe) t += b.moe->alltoall_seconds();
  return t;
}

MlaDims Llama::mla_dims() const {
  MlaDims d;
  d.heads = NHl_;
  d.q_rank = config_.mla.q_lora_rank;
  d.kv_rank = config_.mla.kv_lora_rank;
  d.nope = config_.mla.qk_nope_head_dim;
  d.rope = config_.mla.qk_rope_head_dim;
  d.v = config_.mla.v_head_dim;
  return d;
}

MoeMlp::Shape Llama::moe_shape() const {
  MoeMlp::Shape s;
  s.tokens = B_ * T_;
  s.channels = C_;
  s.seq_len = T_;
  s.expert_width = config_.expert_ffn() / tp_.size();
  s.shared_width = config_.moe.shared_experts * config_.expert_ffn() / tp_.size();
  s.dtype = act_;
  s.device = device_;
  return s;
}

std::unique_ptr<Llama::Acts> Llama::allocate_acts() const {
  auto acts = std::make_unique<Acts>();
  Acts& a = *acts;
  ActTargets t;
  t.one("tokens", a.tokens).one("targets", a.targets).one("encoded", a.encoded);
  t.layers("ln1", a.ln1).layers("rstd1", a.rstd1).layers("qkv", a.qkv).layers("atty", a.atty).layers("att", a.att);
  t.layers("residual2", a.residual2).layers("ln2", a.ln2).layers("rstd2", a.rstd2);
  t.layers("gate", a.gate).layers("up", a.up).layers("h", a.h).layers("output", a.output);
  t.one("lnf", a.lnf).one("rstdf", a.rstdf).one("logits", a.logits).one("losses", a.losses);
  t.one("q", a.q).one("kk", a.kk).one("v", a.v).one("branch_out", a.branch_out).one("dresidual", a.dresidual);
  t.one("dln", a.dln).one("datty", a.datty).one("dh", a.dh).one("dgate", a.dgate).one("dup", a.dup);
  t.one("dqkv", a.dqkv).one("dq", a.dq).one("dk", a.dk).one("dv", a.dv).one("datt", a.datt);
  t.layers("mla_cq", a.cq).layers("mla_cqn", a.cqn).layers("mla_rstdq", a.rstdq).layers("mla_ckv", a.ckv);
  t.layers("mla_ckvn", a.ckvn).layers("mla_rstdkv", a.rstdkv).layers("mla_attv", a.attv);
  MlaScratch& m = a.mla;
  t.one("mla_q", m.q).one("mla_kv", m.kv).one("mla_kva", m.kva).one("mla_qpe", m.qpe).one("mla_kpe", m.kpe);
  t.one("mla_dattv", m.dattv).one("mla_dqpe", m.dqpe).one("mla_dkv", m.dkv).one("mla_dkpe", m.dkpe);
  t.one("mla_dkva", m.dkva).one("mla_dckv", m.dckv).one("mla_dckvn", m.dckvn).one("mla_dcq", m.dcq);
  t.one("mla_dcqn", m.dcqn);
  t.layers("mtp_tokens", a.mtp_tokens).layers("mtp_targets", a.mtp_targets).layers("mtp_emb", a.mtp_emb);
  t.layers("mtp_rstde", a.mtp_rstde).layers("mtp_rstdh", a.mtp_rstdh).layers("mtp_cat", a.mtp_cat);
  t.layers("mtp_x", a.mtp_x).layers("mtp_lnf", a.mtp_lnf).layers("mtp_rstdf", a.mtp_rstdf);
  t.layers("mtp_logits", a.mtp_logits).layers("mtp_losses", a.mtp_losses);
  t.one("mtp_dh", a.mtp_dh).one("mtp_dcat", a.mtp_dcat).one("mtp_part", a.mtp_part).one("mtp_demb", a.mtp_demb);
  a.buf = t.allocate(llama_slot_plan(config_, act_shape()), device_);
  a.mtp_tokens_host.resize(mtp_.size());
  a.mtp_targets_host.resize(mtp_.size());
  // The attention's shared scratch, under MLA's names where the grouped-query attention has its own.
  m.datty = a.datty;
  m.dqkv = a.dqkv;
  m.datt = a.datt;
  m.dq = a.dq;
  // A mixture of experts keeps its own per layer.
  a.moe.resize(static_cast<size_t>(L1_ - L0_) + mtp_.size());
  const size_t n = static_cast<size_t>(L1_ - L0_);  // the chunk's blocks, then the MTP modules' (table blocks L_ + j)
  for (size_t i = 0; i < a.moe.size(); ++i) {
    const Block& b = blocks_[i < n ? static_cast<size_t>(L0_) + i : static_cast<size_t>(L_) + (i - n)];
    if (b.moe) a.moe[i] = b.moe->make_acts(moe_shape());
  }
  return acts;
}

void Llama::init_random(uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L_));
  init_normal(
      seed,
      [&](const ParamSpec& p) {
        // The router's weights are drawn like the matrices': equal weights would give every expert
        // the same logit for every token.
        if (p.kind != ParamKind::matrix && p.kind != ParamKind::embedding && p.kind != ParamKind::router) return 0.0f;
        return p.name.ends_with("o_proj.weight") || p.name.ends_with("down_proj.weight") ? residual_std : 0.02f;
      },
      // RMSNorm weights 1, the sigmoid router's bias 0.
      [](const ParamSpec& p) { return p.kind == ParamKind::buffer ? 0.0f : 1.0f; });
}

void Llama::block_forward(int64_t l, size_t i, const Tensor& in, bool compute_grad) {
  Acts& a = acts<Acts>();
  const Block& b = blocks_[static_cast<size_t>(l)];
  const float eps = static_cast<float>(config_.norm_eps);
  const k::Rope rope = model_rope(config_);
  const int nh = static_cast<int>(NHl_), nkv = static_cast<int>(NKVl_);
  k::rmsnorm_forward(a.ln1[i], a.rstd1[i], in, weight(b.input_norm), eps);
  if (b.mla) {
    b.mla->forward(*this, a.branch_out, a.ln1[i], a.mla_layer(i), a.mla, attention_row_max());
    note_attention_logits(l);
  } else {
    b.qkv->forward(*this, a.ln1[i], {a.q, a.kk, a.v});
    k::rope_forward(a.q, nh, rope);
    k::rope_forward(a.kk, nkv, rope);
    k::qkv_pack_forward(a.qkv[i], a.q, a.kk, a.v, nh, nkv);
    k::attention_forward(a.atty[i], a.att[i], a.qkv[i], nh, attention_row_max());
    note_attention_logits(l);
    b.o->forward(*this, a.branch_out, a.atty[i]);
  }
  k::add(a.residual2[i], in, a.branch_out);
  k::rmsnorm_forward(a.ln2[i], a.rstd2[i], a.residual2[i], weight(b.post_norm), eps);
  if (b.moe) {
    b.moe->forward(*this, a.branch_out, a.ln2[i], a.moe[i]);
    if (compute_grad) tally_moe(l, a.moe[i].aux, a.moe[i].counts);
  } else {
    b.gate_up->forward(*this, a.ln2[i], {a.gate[i], a.up[i]});
    k::swiglu_forward(a.h[i], a.gate[i], a.up[i]);
    b.down->forward(*this, a.branch_out, a.h[i]);
  }
  k::add(a.output[i], a.residual2[i], a.branch_out);
}

double Llama::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad) {
  begin_forward(tokens, targets, compute_grad);
  Acts& a = acts<Acts>();
  if (stage_.embedding) embedding_.forward(*this, a.encoded, a.tokens, a.tokens_host);
  Tensor residual = a.encoded;
  for (int64_t l = L0_; l < L1_; ++l) {
    const size_t i = static_cast<size_t>(l - L0_);
    block_forward(l, i, residual, compute_grad);
    residual = a.output[i];
  }
  if (!stage_.head) return 0.0;
  k::rmsnorm_forward(a.lnf, a.rstdf, residual, weight(norm_), static_cast<float>(config_.norm_eps));
  head_.forward(*this, a.lnf, {a.logits});
  const double loss = head_loss(compute_grad);
  if (compute_grad && !mtp_.empty()) mtp_forward();
  return loss;
}

void Llama::mtp_forward() {
  Acts& a = acts<Acts>();
  const float eps = static_cast<float>(config_.norm_eps);
  const int64_t D = static_cast<int64_t>(mtp_.size()), T = T_;
  const size_t n = static_cast<size_t>(L1_ - L0_);
  double mean = 0;
  Tensor hidden = stage_output();
  for (int64_t k = 1; k <= D; ++k) {
    const size_t j = static_cast<size_t>(k - 1), i = n + j;
    const MtpRows& r = mtp_[j];
    // Module k at position t reads token t + k and predicts token t + k + 1 (the target of
    // position t + k): the batch shifted left by k in each sequence; the last k positions predict nothing.
    std::vector<int32_t>& tok = a.mtp_tokens_host[j];
    std::vector<int32_t>& tgt = a.mtp_targets_host[j];
    tok.assign(static_cast<size_t>(B_ * T), 0);
    tgt.assign(static_cast<size_t>(B_ * T), -1);
    int64_t counted = 0;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t t = 0; t + k < T; ++t) {
        tok[static_cast<size_t>(b * T + t)] = a.tokens_host[static_cast<size_t>(b * T + t + k)];
        tgt[static_cast<size_t>(b * T + t)] = a.targets_host[static_cast<size_t>(b * T + t + k)];
        counted += tgt[static_cast<size_t>(b * T + t)] >= 0;
      }
    k::copy(a.mtp_tokens[j], Tensor::view(tok.data(), {B_, T}, DType::i32));
    k::copy(a.mtp_targets[j], Tensor::view(tgt.data(), {B_, T}, DType::i32));
    embedding_.forward(*this, a.mtp_emb[j], a.mtp_tokens[j], tok);
    k::rmsnorm_forward(a.mtp_part, a.mtp_rstde[j], a.mtp_emb[j], weight(r.enorm), eps);
    k::copy_strided(a.mtp_cat[j].narrow(2, 0, C_), a.mtp_part);
    k::rmsnorm_forward(a.mtp_part, a.mtp_rstdh[j], hidden, weight(r.hnorm), eps);
    k::copy_strided(a.mtp_cat[j].narrow(2, C_, C_), a.mtp_part);
    k::matmul_forward(a.mtp_x[j], a.mtp_cat[j], weight(r.eh), Tensor{}, k::WeightLayout::out_in);
    block_forward(L_ + k - 1, i, a.mtp_x[j], true);
    hidden = a.output[i];
    k::rmsnorm_forward(a.mtp_lnf[j], a.mtp_rstdf[j], hidden, weight(r.norm), eps);
    head_.forward(*this, a.mtp_lnf[j], {a.mtp_logits[j]});
    // d (λ / D · module k's mean loss) / d logits, in place.
    const double per = counted > 0 ? 1.0 / static_cast<double>(counted) : 0.0;
    loss_.forward(a.mtp_losses[j], a.mtp_logits[j], a.mtp_targets[j], tgt,
                  static_cast<float>(config_.mtp_loss_coeff / static_cast<double>(D) * per), true);
    std::vector<float> losses(static_cast<size_t>(B_ * T));
    k::copy(Tensor::view(losses.data(), {B_ * T}), a.mtp_losses[j]);
    double sum = 0;
    for (float v : losses) sum += v;
    mean += sum * per / static_cast<double>(D);
  }
  mtp_tally()[0] += mean;
  mtp_tally()[1] += 1;
}

void Llama::block_backward(int64_t l, size_t i, const Tensor& in, Tensor dres) {
  Acts& a = acts<Acts>();
  const Block& b = blocks_[static_cast<size_t>(l)];
  const k::Rope rope = model_rope(config_);
  const int nh = static_cast<int>(NHl_), nkv = static_cast<int>(NKVl_);
  // output = residual2 + down(swiglu(gate(m), up(m))), m = rmsnorm(residual2) (or the experts' mixture).
  k::fill_zero(a.dln);
  if (b.moe) {
    b.moe->backward(*this, a.dln, a.ln2[i], dres, a.moe[i], moe_scratch_);
  } else {
    k::fill_zero(a.dh);
    b.down->backward(*this, a.dh, a.h[i], dres);
    k::fill_zero(a.dgate);
    k::fill_zero(a.dup);
    k::swiglu_backward(a.dgate, a.dup, a.dh, a.gate[i], a.up[i]);
    b.gate_up->backward(*this, a.dln, a.ln2[i], {a.dgate, a.dup});
  }
  k::rmsnorm_backward(dres, grad(b.post_norm), a.dln, a.residual2[i], weight(b.post_norm), a.rstd2[i]);
  // residual2 = in + o(attention(rope(q), rope(k), v)), q, k, v projections of rmsnorm(in).
  if (b.mla) {
    k::fill_zero(a.dln);
    b.mla->backward(*this, a.dln, a.ln1[i], dres, a.mla_layer(i), a.mla);
  } else {
    k::fill_zero(a.datty);
    b.o->backward(*this, a.datty, a.atty[i], dres);
    k::fill_zero(a.dqkv);
    k::attention_backward(a.dqkv, a.datt, a.datty, a.qkv[i], a.att[i], nh);
    k::fill_zero(a.dq);
    k::fill_zero(a.dk);
    k::fill_zero(a.dv);
    k::qkv_pack_backward(a.dq, a.dk, a.dv, a.dqkv, nh, nkv);
    k::rope_backward(a.dq, nh, rope);
    k::rope_backward(a.dk, nkv, rope);
    k::fill_zero(a.dln);
    b.qkv->backward(*this, a.dln, a.ln1[i], {a.dq, a.dk, a.dv});
  }
  k::rmsnorm_backward(dres, grad(b.input_norm), a.dln, in, weight(b.input_norm), a.rstd1[i]);
}

void Llama::mtp_backward(const GradsReady& ready) {
  Acts& a = acts<Acts>();
  const size_t n = static_cast<size_t>(L1_ - L0_);
  // mtp_dh carries d module k's output down the modules (from module k + 1's hnorm, then its head's).
  k::fill_zero(a.mtp_dh);
  for (size_t j = mtp_.size(); j-- > 0;) {
    const size_t i = n + j;
    const MtpRows& r = mtp_[j];
    k::fill_zero(a.dln);
    head_.backward(*this, a.dln, a.mtp_lnf[j], {a.mtp_logits[j]});  // mtp_logits hold d logits
    k::rmsnorm_backward(a.mtp_dh, grad(r.norm), a.dln, a.output[i], weight(r.norm), a.mtp_rstdf[j]);
    block_backward(L_ + static_cast<int64_t>(j), i, a.mtp_x[j], a.mtp_dh);
    k::fill_zero(a.mtp_dcat);
    k::matmul_backward(a.mtp_dcat, grad(r.eh), Tensor{}, a.mtp_dh, a.mtp_cat[j], weight(r.eh), k::WeightLayout::out_in);
    // [enorm(embedding) | hnorm(hidden)]: the embedding's rows, then the previous output's gradient.
    k::copy_strided(a.mtp_part, a.mtp_dcat.narrow(2, 0, C_));
    k::fill_zero(a.mtp_demb);
    k::rmsnorm_backward(a.mtp_demb, grad(r.enorm), a.mtp_part, a.mtp_emb[j], weight(r.enorm), a.mtp_rstde[j]);
    embedding_.backward(*this, a.mtp_demb, a.mtp_tokens[j], a.mtp_tokens_host[j]);
    k::copy_strided(a.mtp_part, a.mtp_dcat.narrow(2, C_, C_));
    k::fill_zero(a.mtp_dh);
    const Tensor hidden = j == 0 ? stage_output() : a.output[i - 1];
    k::rmsnorm_backward(a.mtp_dh, grad(r.hnorm), a.mtp_part, hidden, weight(r.hnorm), a.mtp_rstdh[j]);
    if (ready) ready(r.rows.first, r.rows.second);
  }
}

void Llama::backward(const GradsReady& ready) {
  begin_backward();
  auto report = [&](std::pair<size_t, size_t> range) {
    if (ready) ready(range.first, range.second);
  };
  Acts& a = acts<Acts>();

  if (stage_.head) {
    // The MTP modules' rows first (the table's last), their gradient of the last hidden state
    // joining the head's.
    if (mtp_.empty()) {
      k::fill_zero(a.dresidual);
    } else {
      mtp_backward(ready);
      k::copy(a.dresidual, a.mtp_dh);
    }
    k::fill_zero(a.dln);
    head_.backward(*this, a.dln, a.lnf, {a.logits});  // a.logits holds d logits
    k::rmsnorm_backward(a.dresidual, grad(norm_), a.dln, stage_output(), weight(norm_), a.rstdf);
    // The head's rows: model.norm and lm_head (a tied head's gradient is reported with the embedding).
    report(config_.tie_embeddings ? row_range({norm_}) : row_range({norm_, head_row_}));
  }
  for (int64_t l = L1_ - 1; l >= L0_; --l) {
    const size_t i = static_cast<size_t>(l - L0_);
    block_backward(l, i, i == 0 ? a.encoded : a.output[i - 1], a.dresidual);
    report(blocks_[static_cast<size_t>(l)].rows);
  }
  if (!stage_.embedding) return;
  embedding_.backward(*this, a.dresidual, a.tokens, a.tokens_host);
  report(row_range({embed_}));
}

}  // namespace precon::worker
