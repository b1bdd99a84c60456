#include "worker/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/parallel/tensor_parallel.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;
using k::Tensor;

// Every activation the backward needs, plus scratch, carved out of one buffer.
struct Gpt::Acts {
  k::Buffer buf;
  Tensor tokens, targets;  // (B, T) i32
  Tensor encoded;          // (B, T, C)
  std::vector<Tensor> ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
      residual3;
  Tensor lnf, lnf_mean, lnf_rstd, logits, losses;
  Tensor branch_out;  // (B, T, C) a residual branch's c_proj output before it joins the stream
  // Backward scratch, each zeroed before the kernel that accumulates into it.
  Tensor dresidual;   // (B, T, C) d loss / d residual stream, carried down through the layers
  Tensor dln;         // (B, T, C) d loss / d a layernorm's output (ln_f, ln_2, ln_1)
  Tensor datty;       // (B, T, C) d loss / d attention output (c_proj input)
  Tensor dfch_gelu;   // (B, T, 4C)
  Tensor dfch;        // (B, T, 4C)
  Tensor dqkv;        // (B, T, 3C)
  Tensor datt;        // (B, NH, T, T) attention probabilities
  int64_t bytes = 0;
  std::vector<int32_t> tokens_host;
  bool grads_ready = false;
};

std::vector<size_t> gpt_stage_rows(const std::vector<ParamSpec>& table, const GptStage& stage) {
  std::vector<size_t> rows;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string& name = table[i].name;
    bool mine = false;
    if (name == "wte.weight") mine = stage.embedding || stage.head;
    else if (name == "wpe.weight") mine = stage.embedding;
    else if (name.rfind("ln_f.", 0) == 0) mine = stage.head;
    else if (name.rfind("h.", 0) == 0) {
      const int64_t l = std::stoll(name.substr(2));
      mine = l >= stage.first_layer && (stage.end_layer < 0 || l < stage.end_layer);
    }
    if (mine) rows.push_back(i);
  }
  return rows;
}

Gpt::Gpt(const ModelConfig& config, int64_t batch_size, k::Device device, const std::string& precision,
         Communicator* tp, const GptStage& stage, ParamStore* shared)
    : config_(config), B_(batch_size), T_(config.seq_len), C_(config.d_model), NH_(config.n_head),
      L_(config.n_layer), V_(config.vocab_size), Vp_(padded_vocab(config.vocab_size)), stage_(stage),
      L0_(stage.first_layer), L1_(stage.end_layer < 0 ? config.n_layer : stage.end_layer), tp_(tp),
      tp_size_(tp ? tp->size() : 1), tp_rank_(tp ? tp->rank() : 0), Cl_(C_ / tp_size_), NHl_(NH_ / tp_size_),
      Vpl_(Vp_ / tp_size_), device_(device), act_(precision == "bf16" ? DType::bf16 : DType::f32) {
  if (L0_ < 0 || L1_ > L_ || L0_ > L1_ || stage.slots < 1)
    throw std::invalid_argument("Gpt: stage blocks [" + std::to_string(L0_) + ", " + std::to_string(L1_) +
                                ") with " + std::to_string(stage.slots) + " slot(s) do not fit n_layer = " +
                                std::to_string(L_));
  // A pipeline stage allocates its own rows only: memory divided by the stages.
  std::vector<ParamSpec> table = gpt2_param_table(config);
  stage_rows_ = gpt_stage_rows(table, stage_);
  if (shared) {
    for (size_t i : stage_rows_)
      if (shared->size() != table.size() || !shared->resident(i))
        throw std::invalid_argument("Gpt: the shared parameter store does not hold " + table[i].name);
    params_ = shared;
  } else {
    own_params_ = std::make_unique<ParamStore>(table, device, stage_rows_);
    params_ = own_params_.get();
  }
  if (tp_size_ > 1) {
    if (device != k::Device::cpu || act_ != DType::f32)
      throw std::invalid_argument("tensor parallelism runs on the CPU in fp32 in this precon-train");
    if (NH_ % tp_size_ != 0 || Vp_ % tp_size_ != 0)
      throw std::invalid_argument("tensor parallelism over " + std::to_string(tp_size_) + " ranks needs it to divide n_head = " +
                                  std::to_string(NH_) + " and the padded vocabulary " + std::to_string(Vp_));
    std::vector<ParamSpec> shards;
    for (const ParamSpec& spec : params_->table()) shards.push_back(tp_shard_spec(spec, tp_size_));
    shard_ = std::make_unique<ParamStore>(std::move(shards), device, stage_rows_);
  }
  const ParamStore& p = *params_;
  wte_ = p.index("wte.weight");
  wpe_ = p.index("wpe.weight");
  ln_f_w_ = p.index("ln_f.weight");
  ln_f_b_ = p.index("ln_f.bias");
  for (int64_t l = 0; l < L_; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto row = [&](const char* name) { return p.index(h + name); };
    layers_.push_back({row("ln_1.weight"), row("ln_1.bias"), row("attn.c_attn.weight"), row("attn.c_attn.bias"),
                       row("attn.c_proj.weight"), row("attn.c_proj.bias"), row("ln_2.weight"), row("ln_2.bias"),
                       row("mlp.c_fc.weight"), row("mlp.c_fc.bias"), row("mlp.c_proj.weight"),
                       row("mlp.c_proj.bias")});
  }
  if (act_ == DType::bf16) {
    shadow_buf_ = k::Buffer(device, compute().total_numel() * sizeof(k::bf16));
    int64_t offset = 0;
    for (size_t i = 0; i < compute().size(); ++i) {
      Tensor p = compute().param(i);
      Tensor s = p;
      s.dtype = DType::bf16;
      s.data = static_cast<char*>(shadow_buf_.data()) + offset * sizeof(k::bf16);
      shadow_.push_back(s);
      offset += p.numel();
    }
  }

  for (int i = 0; i < stage.slots; ++i) slots_.push_back(allocate_acts());
  acts_ = slots_.front().get();
}

// Lays out one slot's activations: a first pass computes offsets, then one allocation.
std::unique_ptr<Gpt::Acts> Gpt::allocate_acts() const {
  auto acts = std::make_unique<Acts>();
  Acts& a = *acts;
  const int64_t BT = B_ * T_, Ll = L1_ - L0_;
  std::vector<std::pair<Tensor*, std::vector<int64_t>>> plan;
  std::vector<DType> dtypes;
  auto want = [&](Tensor* t, std::vector<int64_t> shape, DType dt) {
    plan.emplace_back(t, std::move(shape));
    dtypes.push_back(dt);
  };
  auto per_layer = [&](std::vector<Tensor>& v, std::vector<int64_t> shape, DType dt) {
    v.resize(Ll);
    for (int64_t l = 0; l < Ll; ++l) want(&v[l], shape, dt);
  };
  want(&a.tokens, {B_, T_}, DType::i32);
  want(&a.targets, {B_, T_}, DType::i32);
  want(&a.encoded, {B_, T_, C_}, act_);
  per_layer(a.ln1, {B_, T_, C_}, act_);
  per_layer(a.ln1_mean, {BT}, DType::f32);
  per_layer(a.ln1_rstd, {BT}, DType::f32);
  per_layer(a.qkv, {B_, T_, 3 * Cl_}, act_);
  per_layer(a.atty, {B_, T_, Cl_}, act_);
  per_layer(a.att, {B_, NHl_, T_, T_}, act_);
  per_layer(a.residual2, {B_, T_, C_}, act_);
  per_layer(a.ln2, {B_, T_, C_}, act_);
  per_layer(a.ln2_mean, {BT}, DType::f32);
  per_layer(a.ln2_rstd, {BT}, DType::f32);
  per_layer(a.fch, {B_, T_, 4 * Cl_}, act_);
  per_layer(a.fch_gelu, {B_, T_, 4 * Cl_}, act_);
  per_layer(a.residual3, {B_, T_, C_}, act_);
  want(&a.lnf, {B_, T_, C_}, act_);
  want(&a.lnf_mean, {BT}, DType::f32);
  want(&a.lnf_rstd, {BT}, DType::f32);
  want(&a.logits, {B_, T_, Vpl_}, act_);
  want(&a.losses, {BT}, DType::f32);
  want(&a.branch_out, {B_, T_, C_}, act_);
  want(&a.dresidual, {B_, T_, C_}, act_);
  want(&a.dln, {B_, T_, C_}, act_);
  want(&a.datty, {B_, T_, Cl_}, act_);
  want(&a.dfch_gelu, {B_, T_, 4 * Cl_}, act_);
  want(&a.dfch, {B_, T_, 4 * Cl_}, act_);
  want(&a.dqkv, {B_, T_, 3 * Cl_}, act_);
  want(&a.datt, {B_, NHl_, T_, T_}, act_);
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    int64_t n = 1;
    for (int64_t s : plan[i].second) n *= s;
    offsets.push_back(total);
    total += (n * static_cast<int64_t>(k::dtype_size(dtypes[i])) + 63) / 64 * 64;
  }
  a.buf = k::Buffer(device_, total);
  a.bytes = total;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& s = plan[i].second;
    char* base = static_cast<char*>(a.buf.data()) + offsets[i];
    Tensor t;
    if (s.size() == 1) t = Tensor::view(base, {s[0]}, dtypes[i], device_);
    else if (s.size() == 2) t = Tensor::view(base, {s[0], s[1]}, dtypes[i], device_);
    else if (s.size() == 3) t = Tensor::view(base, {s[0], s[1], s[2]}, dtypes[i], device_);
    else t = Tensor::view(base, {s[0], s[1], s[2], s[3]}, dtypes[i], device_);
    *plan[i].first = t;
  }
  return acts;
}

Gpt::~Gpt() = default;

int64_t Gpt::activation_bytes() const { return acts_->bytes * static_cast<int64_t>(slots_.size()); }

void Gpt::select_slot(int slot) { acts_ = slots_.at(static_cast<size_t>(slot)).get(); }
Tensor Gpt::stage_input() const { return acts_->encoded; }
Tensor Gpt::stage_output() const { return L1_ > L0_ ? acts_->residual3[L1_ - L0_ - 1] : acts_->encoded; }
Tensor Gpt::output_grad() const { return acts_->dresidual; }
Tensor Gpt::input_grad() const { return acts_->dresidual; }

Tensor Gpt::weight(size_t row) const { return act_ == DType::bf16 ? shadow_[row] : compute().param(row); }

void Gpt::take_shards() {
  if (!shard_) return;
  for (size_t i : stage_rows_)
    copy_tp_shard(params_->spec(i), params_->param(i).f32(), shard_->param(i).f32(), tp_rank_, tp_size_, true);
}

void Gpt::zero_grads() {
  if (own_params_) params_->zero_grads();
  else
    for (size_t i : stage_rows_) k::fill_zero(params_->grad(i));
  if (shard_) shard_->zero_grads();
}

void Gpt::place_grads_for_sum() {
  if (!shard_) return;
  for (size_t i : stage_rows_) {
    const ParamSpec& spec = params_->spec(i);
    Tensor full = params_->grad(i);
    k::fill_zero(full);
    if (spec.tp_split_dim >= 0) copy_tp_shard(spec, full.f32(), shard_->grad(i).f32(), tp_rank_, tp_size_, false);
    else if (tp_rank_ == 0) k::copy(full, shard_->grad(i));
  }
}

void Gpt::cast_weights() {
  if (act_ != DType::bf16) return;
  Tensor all = compute().all_params();
  Tensor shadow = Tensor::view(shadow_buf_.data(), {all.numel()}, DType::bf16, device_);
  k::cast(shadow, all);
}

void Gpt::init_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L_));
  for (size_t i = 0; i < params_->size(); ++i) {
    const ParamSpec& p = params_->spec(i);
    const bool random = p.kind == ParamKind::matrix || p.kind == ParamKind::embedding || p.kind == ParamKind::position;
    if (!params_->resident(i)) {  // another stage's row: its draws still advance the one stream
      if (random)
        for (int64_t j = 0; j < p.numel(); ++j) normal(rng);
      continue;
    }
    std::vector<float> host(params_->param(i).numel(), 0.0f);
    const bool residual_proj = p.name.find("c_proj.weight") != std::string::npos;
    const bool ln_weight = p.kind == ParamKind::norm && p.name.find(".weight") != std::string::npos;
    if (random) {
      const float std = residual_proj ? residual_std : 0.02f;
      for (int64_t j = 0; j < p.numel(); ++j) host[j] = std * normal(rng);  // padded wte rows stay zero
    } else if (ln_weight) {
      for (float& v : host) v = 1.0f;
    }
    Tensor src = params_->param(i);
    src.data = host.data();
    src.device = k::Device::cpu;
    k::copy(params_->param(i), src);
  }
}

double Gpt::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad) {
  Acts& a = *acts_;
  const int64_t BT = B_ * T_;
  if (static_cast<int64_t>(tokens.size()) != BT || static_cast<int64_t>(targets.size()) != BT)
    throw std::invalid_argument("Gpt::forward: expected " + std::to_string(BT) + " tokens and targets (B=" +
                                std::to_string(B_) + ", T=" + std::to_string(T_) + "), got " +
                                std::to_string(tokens.size()) + " and " + std::to_string(targets.size()));
  a.tokens_host = tokens;
  std::vector<int32_t> tok = tokens, tgt = targets;
  k::copy(a.tokens, Tensor::view(tok.data(), {B_, T_}, DType::i32));
  k::copy(a.targets, Tensor::view(tgt.data(), {B_, T_}, DType::i32));
  take_shards();
  cast_weights();
  // Under tensor parallelism (Megatron's regions): the residual stream and the layernorms are
  // replicated; c_attn and c_fc are column-parallel (this rank's heads, this rank's MLP columns),
  // their input copied to the region; attn.c_proj and mlp.c_proj are row-parallel, their partial
  // outputs reduced from the region, the bias added once (by the first rank).
  const bool tp = tp_size_ > 1;
  const Tensor no_bias{};
  auto row_bias = [&](size_t row) { return tp_rank_ == 0 ? weight(row) : no_bias; };

  if (!stage_.embedding) {
    // a.encoded holds the previous stage's output (stage_input()).
  } else if (tp) {
    vocab_parallel_embedding_forward(a.encoded, tokens.data(), B_, T_, weight(wte_), tp_rank_ * Vpl_,
                                     weight(wpe_).narrow(0, 0, T_), *tp_);
  } else {
    k::encoder_forward(a.encoded, a.tokens, weight(wte_), weight(wpe_).narrow(0, 0, T_));
  }
  Tensor residual = a.encoded;
  for (int64_t l = L0_; l < L1_; ++l) {
    const LayerRows& r = layers_[l];
    const size_t i = static_cast<size_t>(l - L0_);
    k::layernorm_forward(a.ln1[i], a.ln1_mean[i], a.ln1_rstd[i], residual, weight(r.ln_1_w), weight(r.ln_1_b));
    if (tp) copy_to_tp_region_forward(a.ln1[i], *tp_);
    k::matmul_forward(a.qkv[i], a.ln1[i], weight(r.c_attn_w), weight(r.c_attn_b), k::WeightLayout::in_out);
    k::attention_forward(a.atty[i], a.att[i], a.qkv[i], static_cast<int>(NHl_));
    k::matmul_forward(a.branch_out, a.atty[i], weight(r.attn_proj_w), row_bias(r.attn_proj_b), k::WeightLayout::in_out);
    if (tp) reduce_from_tp_region_forward(a.branch_out, *tp_);
    k::add(a.residual2[i], residual, a.branch_out);
    k::layernorm_forward(a.ln2[i], a.ln2_mean[i], a.ln2_rstd[i], a.residual2[i], weight(r.ln_2_w), weight(r.ln_2_b));
    if (tp) copy_to_tp_region_forward(a.ln2[i], *tp_);
    k::matmul_forward(a.fch[i], a.ln2[i], weight(r.c_fc_w), weight(r.c_fc_b), k::WeightLayout::in_out);
    k::gelu_forward(a.fch_gelu[i], a.fch[i]);
    k::matmul_forward(a.branch_out, a.fch_gelu[i], weight(r.mlp_proj_w), row_bias(r.mlp_proj_b),
                      k::WeightLayout::in_out);
    if (tp) reduce_from_tp_region_forward(a.branch_out, *tp_);
    k::add(a.residual3[i], a.residual2[i], a.branch_out);
    residual = a.residual3[i];
  }
  a.grads_ready = compute_grad;
  if (!stage_.head) return 0.0;  // the residual stream goes on to the next stage (stage_output())
  k::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, weight(ln_f_w_), weight(ln_f_b_));
  if (tp) copy_to_tp_region_forward(a.lnf, *tp_);
  k::matmul_forward(a.logits, a.lnf, weight(wte_), Tensor{}, k::WeightLayout::out_in);  // this rank's vocabulary

  int64_t counted = 0;
  for (int32_t t : targets) counted += t >= 0;
  const double dloss = counted > 0 ? 1.0 / static_cast<double>(counted) : 0.0;
  if (tp) {
    vocab_parallel_cross_entropy(a.losses, a.logits, targets.data(), tp_rank_ * Vpl_, V_, static_cast<float>(dloss),
                                 compute_grad, *tp_);
  } else if (compute_grad) {
    k::crossentropy_backward(a.logits, a.losses, a.logits, a.targets, static_cast<int>(V_), static_cast<float>(dloss));
  } else {
    k::crossentropy_forward(a.losses, a.logits, a.targets, static_cast<int>(V_));
  }
  std::vector<float> losses(BT);
  k::copy(Tensor::view(losses.data(), {BT}), a.losses);
  double sum = 0.0;
  for (float v : losses) sum += v;
  return sum * dloss;
}

std::pair<size_t, size_t> Gpt::row_range(std::initializer_list<size_t> rows) {
  return {std::min(rows), std::max(rows) + 1};
}

void Gpt::backward(const GradsReady& ready) {
  std::function<void(std::pair<size_t, size_t>)> report = [&](std::pair<size_t, size_t> range) {
    if (ready) ready(range.first, range.second);
  };
  Acts& a = *acts_;
  if (!a.grads_ready) throw std::logic_error("Gpt::backward needs a forward with compute_grad first");
  a.grads_ready = false;
  ParamStore& p = compute();
  const int nh = static_cast<int>(NHl_);
  const bool tp = tp_size_ > 1;
  if (tp) report = [](std::pair<size_t, size_t>) {};  // the trainer sums whole gradients after the backward
  const Tensor no_bias{};
  auto row_dbias = [&](size_t row) { return tp_rank_ == 0 ? p.grad(row) : no_bias; };

  if (stage_.head) {
    k::fill_zero(a.dresidual);
    k::fill_zero(a.dln);
    // logits = lnf · wteᵀ (tied head): a.logits now holds dlogits.
    k::matmul_backward(a.dln, p.grad(wte_), Tensor{}, a.logits, a.lnf, weight(wte_), k::WeightLayout::out_in);
    if (tp) copy_to_tp_region_backward(a.dln, *tp_);
    k::layernorm_backward(a.dresidual, p.grad(ln_f_w_), p.grad(ln_f_b_), a.dln, stage_output(), weight(ln_f_w_),
                          a.lnf_mean, a.lnf_rstd);
    report(row_range({ln_f_w_, ln_f_b_}));
  }  // else a.dresidual holds the next stage's gradient of this stage's output (output_grad())

  for (int64_t l = L1_ - 1; l >= L0_; --l) {
    const LayerRows& r = layers_[l];
    const size_t i = static_cast<size_t>(l - L0_);
    const Tensor residual = i == 0 ? a.encoded : a.residual3[i - 1];
    // residual3 = residual2 + mlp(ln2(residual2)); dresidual holds d residual3.
    k::fill_zero(a.dfch_gelu);
    k::matmul_backward(a.dfch_gelu, p.grad(r.mlp_proj_w), row_dbias(r.mlp_proj_b), a.dresidual, a.fch_gelu[i],
                       weight(r.mlp_proj_w), k::WeightLayout::in_out);
    k::fill_zero(a.dfch);
    k::gelu_backward(a.dfch, a.fch[i], a.dfch_gelu);
    k::fill_zero(a.dln);
    k::matmul_backward(a.dln, p.grad(r.c_fc_w), p.grad(r.c_fc_b), a.dfch, a.ln2[i], weight(r.c_fc_w),
                       k::WeightLayout::in_out);
    if (tp) copy_to_tp_region_backward(a.dln, *tp_);
    k::layernorm_backward(a.dresidual, p.grad(r.ln_2_w), p.grad(r.ln_2_b), a.dln, a.residual2[i], weight(r.ln_2_w),
                          a.ln2_mean[i], a.ln2_rstd[i]);
    // residual2 = residual + attn(ln1(residual)); dresidual now holds d residual2.
    k::fill_zero(a.datty);
    k::matmul_backward(a.datty, p.grad(r.attn_proj_w), row_dbias(r.attn_proj_b), a.dresidual, a.atty[i],
                       weight(r.attn_proj_w), k::WeightLayout::in_out);
    k::fill_zero(a.dqkv);
    k::attention_backward(a.dqkv, a.datt, a.datty, a.qkv[i], a.att[i], nh);
    k::fill_zero(a.dln);
    k::matmul_backward(a.dln, p.grad(r.c_attn_w), p.grad(r.c_attn_b), a.dqkv, a.ln1[i], weight(r.c_attn_w),
                       k::WeightLayout::in_out);
    if (tp) copy_to_tp_region_backward(a.dln, *tp_);
    k::layernorm_backward(a.dresidual, p.grad(r.ln_1_w), p.grad(r.ln_1_b), a.dln, residual, weight(r.ln_1_w),
                          a.ln1_mean[i], a.ln1_rstd[i]);
    report(row_range({r.ln_1_w, r.ln_1_b, r.c_attn_w, r.c_attn_b, r.attn_proj_w, r.attn_proj_b, r.ln_2_w, r.ln_2_b,
                      r.c_fc_w, r.c_fc_b, r.mlp_proj_w, r.mlp_proj_b}));
  }
  if (!stage_.embedding) return;  // a.dresidual is the gradient of this stage's input (input_grad())
  if (tp) {
    vocab_parallel_embedding_backward(p.grad(wte_), p.grad(wpe_).narrow(0, 0, T_), a.dresidual, a.tokens_host.data(),
                                      B_, T_, tp_rank_ * Vpl_);
  } else {
    k::encoder_backward(p.grad(wte_), p.grad(wpe_).narrow(0, 0, T_), a.dresidual, a.tokens);
  }
  report(row_range({wte_, wpe_}));
}

std::vector<float> Gpt::logits_host() const {
  if (tp_size_ > 1) throw std::logic_error("Gpt::logits_host: under tensor parallelism each rank holds a vocabulary shard");
  const Acts& a = *acts_;
  const int64_t BT = B_ * T_;
  std::vector<float> padded(BT * Vp_), out(BT * V_);
  if (act_ == DType::f32) {
    k::copy(Tensor::view(padded.data(), {B_, T_, Vp_}), a.logits);
  } else {
    k::Buffer tmp(device_, BT * Vp_ * sizeof(float));
    k::cast(tmp.view({B_, T_, Vp_}), a.logits);
    k::copy(Tensor::view(padded.data(), {B_, T_, Vp_}), tmp.view({B_, T_, Vp_}));
  }
  for (int64_t i = 0; i < BT; ++i)
    for (int64_t v = 0; v < V_; ++v) out[i * V_ + v] = padded[i * Vp_ + v];
  return out;
}

double Gpt::flops_per_step() const {
  // 6 FLOPs per parameter per token (forward 2, backward 4) for the matmuls, the tied head
  // counted once; attention's QKᵀ and att·V add 12·L·C·T per token (causal half not credited).
  double n = 0;
  for (const ParamSpec& s : params_->table())
    if (s.kind == ParamKind::matrix || s.kind == ParamKind::embedding) n += static_cast<double>(s.numel());
  const double tokens = static_cast<double>(B_ * T_);
  return 6.0 * n * tokens + 12.0 * L_ * C_ * T_ * tokens;
}

}  // namespace precon::worker
