#include "worker/model/gpt.h"

#include <cmath>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/model/activations.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;
using k::Tensor;

// Every activation the backward needs, plus scratch, carved out of one buffer.
struct Gpt::Acts : Model::Acts {
  std::vector<Tensor> ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  Tensor lnf, lnf_mean, lnf_rstd;
  Tensor branch_out;  // (B, T, C) a residual branch's c_proj output before it joins the stream
  // Backward scratch, each zeroed before the kernel that accumulates into it.
  Tensor dln;         // (B, T, C) d loss / d a layernorm's output (ln_f, ln_2, ln_1)
  Tensor datty;       // (B, T, C) d loss / d attention output (c_proj input)
  Tensor dfch_gelu;   // (B, T, 4C)
  Tensor dfch;        // (B, T, 4C)
  Tensor dqkv;        // (B, T, 3C)
  Tensor datt;        // (B, NH, T, T) attention probabilities
};

Gpt::Gpt(const ModelConfig& config, int64_t batch_size, k::Device device, const std::string& precision,
         TpGroup tp, const ModelStage& stage, ParamStore* shared)
    : Model(config, gpt2_param_table(config), batch_size, device, precision, tp, stage, shared),
      Cl_(C_ / tp_.size()), wte_(params().index("wte.weight")), wpe_(params().index("wpe.weight")),
      ln_f_w_(params().index("ln_f.weight")), ln_f_b_(params().index("ln_f.bias")),
      embedding_(tp_, wte_, wpe_), head_(tp_, {wte_}, {}, k::WeightLayout::out_in) {
  // Under tensor parallelism (Megatron's layers): the residual stream and the layernorms are
  // replicated; c_attn and c_fc are column-parallel (this rank's heads, this rank's MLP columns),
  // attn.c_proj and mlp.c_proj row-parallel.
  const ParamStore& p = params();
  const auto in_out = k::WeightLayout::in_out;
  for (int64_t l = 0; l < L_; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto row = [&](const char* name) { return p.index(h + name); };
    blocks_.push_back({row("ln_1.weight"), row("ln_1.bias"), row("ln_2.weight"), row("ln_2.bias"),
                       ColumnParallelLinear(tp_, {row("attn.c_attn.weight")}, {row("attn.c_attn.bias")}, in_out),
                       RowParallelLinear(tp_, row("attn.c_proj.weight"), row("attn.c_proj.bias"), in_out),
                       ColumnParallelLinear(tp_, {row("mlp.c_fc.weight")}, {row("mlp.c_fc.bias")}, in_out),
                       RowParallelLinear(tp_, row("mlp.c_proj.weight"), row("mlp.c_proj.bias"), in_out),
                       row_range({row("ln_1.weight"), row("mlp.c_proj.bias")})});
  }
  allocate_slots([this] { return allocate_acts(); });
}

std::unique_ptr<Gpt::Acts> Gpt::allocate_acts() const {
  auto acts = std::make_unique<Acts>();
  Acts& a = *acts;
  ActTargets t;
  t.one("tokens", a.tokens).one("targets", a.targets).one("encoded", a.encoded);
  t.layers("ln1", a.ln1).layers("ln1_mean", a.ln1_mean).layers("ln1_rstd", a.ln1_rstd).layers("qkv", a.qkv);
  t.layers("atty", a.atty).layers("att", a.att).layers("residual2", a.residual2).layers("ln2", a.ln2);
  t.layers("ln2_mean", a.ln2_mean).layers("ln2_rstd", a.ln2_rstd).layers("fch", a.fch);
  t.layers("fch_gelu", a.fch_gelu).layers("output", a.output);
  t.one("lnf", a.lnf).one("lnf_mean", a.lnf_mean).one("lnf_rstd", a.lnf_rstd).one("logits", a.logits);
  t.one("losses", a.losses).one("branch_out", a.branch_out).one("dresidual", a.dresidual).one("dln", a.dln);
  t.one("datty", a.datty).one("dfch_gelu", a.dfch_gelu).one("dfch", a.dfch).one("dqkv", a.dqkv).one("datt", a.datt);
  a.buf = t.allocate(gpt_slot_plan(config_, act_shape()), device_);
  return acts;
}

void Gpt::init_random(uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L_));
  init_normal(
      seed,
      [&](const ParamSpec& p) {
        if (p.kind != ParamKind::matrix && p.kind != ParamKind::embedding && p.kind != ParamKind::position) return 0.0f;
        return p.name.find("c_proj.weight") != std::string::npos ? residual_std : 0.02f;
      },
      [](const ParamSpec& p) {  // layernorm weights 1, biases 0
        return p.kind == ParamKind::norm && p.name.find(".weight") != std::string::npos ? 1.0f : 0.0f;
      });
}

double Gpt::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad) {
  begin_forward(tokens, targets, compute_grad);
  Acts& a = acts<Acts>();
  // A stage without the embedding finds the previous stage's output in a.encoded (stage_input()).
  if (stage_.embedding) embedding_.forward(*this, a.encoded, a.tokens, a.tokens_host);
  Tensor residual = a.encoded;
  for (int64_t l = L0_; l < L1_; ++l) {
    const Block& b = blocks_[static_cast<size_t>(l)];
    const size_t i = static_cast<size_t>(l - L0_);
    k::layernorm_forward(a.ln1[i], a.ln1_mean[i], a.ln1_rstd[i], residual, weight(b.ln_1_w), weight(b.ln_1_b));
    b.c_attn.forward(*this, a.ln1[i], {a.qkv[i]});
    k::attention_forward(a.atty[i], a.att[i], a.qkv[i], static_cast<int>(NHl_), attention_row_max());
    note_attention_logits(l);
    b.attn_proj.forward(*this, a.branch_out, a.atty[i]);
    k::add(a.residual2[i], residual, a.branch_out);
    k::layernorm_forward(a.ln2[i], a.ln2_mean[i], a.ln2_rstd[i], a.residual2[i], weight(b.ln_2_w), weight(b.ln_2_b));
    b.c_fc.forward(*this, a.ln2[i], {a.fch[i]});
    k::gelu_forward(a.fch_gelu[i], a.fch[i]);
    b.mlp_proj.forward(*this, a.branch_out, a.fch_gelu[i]);
    k::add(a.output[i], a.residual2[i], a.branch_out);
    residual = a.output[i];
  }
  if (!stage_.head) return 0.0;  // the residual stream goes on to the next stage (stage_output())
  k::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, weight(ln_f_w_), weight(ln_f_b_));
  head_.forward(*this, a.lnf, {a.logits});  // this rank's vocabulary
  return head_loss(compute_grad);
}

void Gpt::backward(const GradsReady& ready) {
  begin_backward();
  auto report = [&](std::pair<size_t, size_t> range) {
    if (ready) ready(range.first, range.second);
  };
  Acts& a = acts<Acts>();
  const int nh = static_cast<int>(NHl_);

  if (stage_.head) {
    k::fill_zero(a.dresidual);
    k::fill_zero(a.dln);
    // logits = lnf · wteᵀ (tied head): a.logits now holds dlogits.
    head_.backward(*this, a.dln, a.lnf, {a.logits});
    k::layernorm_backward(a.dresidual, grad(ln_f_w_), grad(ln_f_b_), a.dln, stage_output(), weight(ln_f_w_),
                          a.lnf_mean, a.lnf_rstd);
    report(row_range({ln_f_w_, ln_f_b_}));
  }  // else a.dresidual holds the next stage's gradient of this stage's output (output_grad())

  for (int64_t l = L1_ - 1; l >= L0_; --l) {
    const Block& b = blocks_[static_cast<size_t>(l)];
    const size_t i = static_cast<size_t>(l - L0_);
    const Tensor residual = i == 0 ? a.encoded : a.output[i - 1];
    // output = residual2 + mlp(ln2(residual2)); dresidual holds d output.
    k::fill_zero(a.dfch_gelu);
    b.mlp_proj.backward(*this, a.dfch_gelu, a.fch_gelu[i], a.dresidual);
    k::fill_zero(a.dfch);
    k::gelu_backward(a.dfch, a.fch[i], a.dfch_gelu);
    k::fill_zero(a.dln);
    b.c_fc.backward(*this, a.dln, a.ln2[i], {a.dfch});
    k::layernorm_backward(a.dresidual, grad(b.ln_2_w), grad(b.ln_2_b), a.dln, a.residual2[i], weight(b.ln_2_w),
                          a.ln2_mean[i], a.ln2_rstd[i]);
    // residual2 = residual + attn(ln1(residual)); dresidual now holds d residual2.
    k::fill_zero(a.datty);
    b.attn_proj.backward(*this, a.datty, a.atty[i], a.dresidual);
    k::fill_zero(a.dqkv);
    k::attention_backward(a.dqkv, a.datt, a.datty, a.qkv[i], a.att[i], nh);
    k::fill_zero(a.dln);
    b.c_attn.backward(*this, a.dln, a.ln1[i], {a.dqkv});
    k::layernorm_backward(a.dresidual, grad(b.ln_1_w), grad(b.ln_1_b), a.dln, residual, weight(b.ln_1_w),
                          a.ln1_mean[i], a.ln1_rstd[i]);
    report(b.rows);
  }
  if (!stage_.embedding) return;  // a.dresidual is the gradient of this stage's input (input_grad())
  embedding_.backward(*this, a.dresidual, a.tokens, a.tokens_host);
  report(row_range({wte_, wpe_}));
}

}  // namespace precon::worker
