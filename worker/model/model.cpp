#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/config/choice.h"
#include "worker/model/gpt.h"
#include "worker/model/llama.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;
using k::Tensor;

namespace {

// train.precision: the activations' type (the master weights stay fp32).
constexpr Choice<DType> kActivationTypes[] = {{"fp32", DType::f32}, {"bf16", DType::bf16}};

}  // namespace

Model::Model(const ModelConfig& config, std::vector<ParamSpec> table, int64_t batch_size, k::Device device,
             const std::string& precision, TpGroup tp, const ModelStage& stage, ParamStore* shared)
    : config_(config), B_(batch_size), T_(config.seq_len), C_(config.d_model), NH_(config.n_head),
      L_(config.n_layer), V_(config.vocab_size), Vp_(padded_vocab(config.vocab_size)), stage_(stage),
      L0_(stage.first_layer), L1_(stage.end_layer < 0 ? config.n_layer : stage.end_layer), tp_{tp},
      NHl_(NH_ / tp_.size()), Vpl_(Vp_ / tp_.size()), device_(device),
      act_(parse_choice<std::invalid_argument>("train.precision", precision, kActivationTypes)),
      loss_(tp_, config.vocab_size) {
  if (L0_ < 0 || L1_ > L_ || L0_ > L1_ || stage.slots < 1)
    throw std::invalid_argument("model: stage blocks [" + std::to_string(L0_) + ", " + std::to_string(L1_) +
                                ") with " + std::to_string(stage.slots) + " slot(s) do not fit n_layer = " +
                                std::to_string(L_));
  // A pipeline stage allocates its own rows only: memory divided by the stages.
  stage_rows_ = stage_rows(table, stage_);
  const TpPlace place{tp_.rank(), tp_.size()};
  if (shared) {
    for (size_t i : stage_rows_)
      if (shared->size() != table.size() || !shared->resident(i))
        throw std::invalid_argument("model: the shared parameter store does not hold " + table[i].name);
    if (!(shared->tp() == place))
      throw std::invalid_argument("model: the shared parameter store holds another tensor-parallel part");
    params_ = shared;
  }
  if (tp_.parallel()) {
    const int t = tp_.size();
    if (device != k::Device::cpu || act_ != DType::f32)
      throw std::invalid_argument("tensor parallelism runs on the CPU in fp32 in this precon-train");
    if (NH_ % t != 0 || Vp_ % t != 0 || config.kv_heads() % t != 0 || config.ffn() % t != 0 ||
        (config.moe.experts > 0 && config.expert_ffn() % t != 0))
      throw std::invalid_argument("tensor parallelism over " + std::to_string(t) + " ranks needs it to divide n_head = " +
                                  std::to_string(NH_) + ", n_kv_head = " + std::to_string(config.kv_heads()) +
                                  ", the MLP width " + std::to_string(config.ffn()) +
                                  (config.moe.experts > 0 ? ", each expert's width " + std::to_string(config.expert_ffn())
                                                          : std::string()) +
                                  " and the padded vocabulary " + std::to_string(Vp_));
  }
  if (!shared) {
    // Under tensor parallelism the store holds this rank's parts only (params.h tp_part_spec).
    own_params_ = std::make_unique<ParamStore>(table, device, stage_rows_, place);
    params_ = own_params_.get();
  }
  if (config.moe.experts > 0) moe_tally_.assign(static_cast<size_t>(1 + config.blocks() * config.moe.experts), 0.0);
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
}

Model::~Model() = default;

void Model::allocate_slots(const std::function<std::unique_ptr<Acts>()>& make) {
  for (int i = 0; i < stage_.slots; ++i) slots_.push_back(make());
  acts_ = slots_.front().get();
}

Model::Bytes Model::bytes() const {
  Bytes b;
  const int64_t f32 = sizeof(float);
  if (own_params_) b.params = b.grads = own_params_->total_numel() * f32;
  b.params += static_cast<int64_t>(shadow_buf_.bytes());
  for (const auto& slot : slots_) b.activations += static_cast<int64_t>(slot->buf.bytes()) + slot->other_bytes();
  b.activations += family_activation_bytes();
  b.activations += static_cast<int64_t>(row_max_buf_.bytes());
  return b;
}

ActShape Model::act_shape() const {
  ActShape s;
  s.batch = B_;
  s.tensor = tp_.size();
  s.first_layer = L0_;
  s.end_layer = L1_;
  s.dtype = act_;
  return s;
}

void Model::select_slot(int slot) { acts_ = slots_.at(static_cast<size_t>(slot)).get(); }
Tensor Model::stage_input() const { return acts_->encoded; }
Tensor Model::stage_output() const { return L1_ > L0_ ? acts_->output[static_cast<size_t>(L1_ - L0_ - 1)] : acts_->encoded; }
Tensor Model::output_grad() const { return acts_->dresidual; }
Tensor Model::input_grad() const { return acts_->dresidual; }

Tensor Model::weight(size_t row) const { return act_ == DType::bf16 ? shadow_[row] : compute().param(row); }

void Model::zero_grads() {
  if (own_params_) params_->zero_grads();
  else
    for (size_t i : stage_rows_) k::fill_zero(params_->grad(i));
}

void Model::track_attention_logits() {
  row_max_buf_ = k::Buffer(device_, static_cast<size_t>(B_ * NHl_ * T_) * sizeof(float));
  row_max_ = row_max_buf_.view({B_, NHl_, T_});
  qk_max_.assign(static_cast<size_t>(config_.blocks() * NH_), -INFINITY);
}

void Model::note_attention_logits(int64_t layer) {
  if (!row_max_.data || !acts_->grads_ready) return;
  std::vector<float> rows(static_cast<size_t>(row_max_.numel()));
  k::copy(Tensor::view(rows.data(), {row_max_.numel()}), row_max_.reshape({row_max_.numel()}));
  float* out = qk_max_.data() + layer * NH_ + tp_.rank() * NHl_;
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t h = 0; h < NHl_; ++h)
      for (int64_t t = 0; t < T_; ++t) out[h] = std::max(out[h], rows[static_cast<size_t>((b * NHl_ + h) * T_ + t)]);
}

void Model::cast_weights() {
  if (act_ != DType::bf16) return;
  Tensor all = compute().all_params();
  Tensor shadow = Tensor::view(shadow_buf_.data(), {all.numel()}, DType::bf16, device_);
  k::cast(shadow, all);
}

void Model::init_normal(uint64_t seed, const std::function<float(const ParamSpec&)>& std_of,
                        const std::function<float(const ParamSpec&)>& fill_of) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ParamStore& store = *params_;
  for (size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& p = store.spec(i);
    const float std = std_of(p);
    if (!store.resident(i)) {  // another stage's row: its draws still advance the one stream
      if (std > 0)
        for (int64_t j = 0; j < p.numel(); ++j) normal(rng);
      continue;
    }
    // The whole tensor is drawn (one at a time), then this rank's part of it kept.
    std::vector<float> host(static_cast<size_t>(p.storage_numel()), 0.0f);
    if (std > 0) {
      for (int64_t j = 0; j < p.numel(); ++j) host[j] = std * normal(rng);  // padded rows stay zero
    } else {
      const float fill = fill_of(p);
      for (float& v : host) v = fill;
    }
    copy_part_from_full(p, host.data(), store.param(i), store.tp());
  }
}

void Model::begin_forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad) {
  Acts& a = *acts_;
  const int64_t BT = B_ * T_;
  if (static_cast<int64_t>(tokens.size()) != BT || static_cast<int64_t>(targets.size()) != BT)
    throw std::invalid_argument("model forward: expected " + std::to_string(BT) + " tokens and targets (B=" +
                                std::to_string(B_) + ", T=" + std::to_string(T_) + "), got " +
                                std::to_string(tokens.size()) + " and " + std::to_string(targets.size()));
  a.tokens_host = tokens;
  a.targets_host = targets;
  k::copy(a.tokens, Tensor::view(a.tokens_host.data(), {B_, T_}, DType::i32));
  k::copy(a.targets, Tensor::view(a.targets_host.data(), {B_, T_}, DType::i32));
  cast_weights();
  a.grads_ready = compute_grad;
}

double Model::head_loss(bool compute_grad) {
  Acts& a = *acts_;
  const int64_t BT = B_ * T_;
  int64_t counted = 0;
  for (int32_t t : a.targets_host) counted += t >= 0;
  const double dloss = counted > 0 ? 1.0 / static_cast<double>(counted) : 0.0;
  loss_.forward(a.losses, a.logits, a.targets, a.targets_host, static_cast<float>(dloss), compute_grad);
  std::vector<float> losses(BT);
  k::copy(Tensor::view(losses.data(), {BT}), a.losses);
  double sum = 0.0;
  for (float v : losses) sum += v;
  return sum * dloss;
}

void Model::begin_backward() {
  if (!acts_->grads_ready) throw std::logic_error("model backward needs a forward with compute_grad first");
  acts_->grads_ready = false;
}

void Model::tally_moe(int64_t layer, double aux, const std::vector<int64_t>& counts) {
  moe_tally_[0] += aux;
  double* row = moe_tally_.data() + 1 + layer * config_.moe.experts;
  for (size_t e = 0; e < counts.size(); ++e) row[e] += static_cast<double>(counts[e]);
}

std::pair<size_t, size_t> Model::row_range(std::initializer_list<size_t> rows) {
  return {std::min(rows), std::max(rows) + 1};
}

std::vector<float> Model::logits_host() const {
  if (tp_.parallel()) throw std::logic_error("logits_host: under tensor parallelism each rank holds a vocabulary part");
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

double Model::flops_per_token() const {
  double n = 0;
  const MoeConfig& moe = config_.moe;
  for (const ParamSpec& s : params_->table()) {
    // The vocabulary matrix of the head: lm_head, or the embedding when it is tied (gpt2 always).
    const bool head = s.kind == ParamKind::embedding && s.head_end &&
                      (!s.embedding_end || config_.tie_embeddings || !config_.llama());
    if (s.kind != ParamKind::matrix && s.kind != ParamKind::router && !head) continue;
    // A routed expert's weights work for top_k of every E tokens.
    const bool routed = s.name.find(".mlp.experts.") != std::string::npos;
    n += static_cast<double>(s.numel()) * (routed ? static_cast<double>(moe.top_k) / static_cast<double>(moe.experts) : 1.0);
  }
  // Each multi-token prediction module applies the (shared) head once more.
  n += static_cast<double>(config_.mtp_layers * V_ * C_);
  // Attention's products: QKᵀ over nope + rope channels, att·V over v (C each without MLA), in the
  // model's blocks and the MTP modules'.
  const MlaConfig& mla = config_.mla;
  const double qk = config_.uses_mla() ? static_cast<double>(NH_ * (mla.qk_nope_head_dim + mla.qk_rope_head_dim))
                                       : static_cast<double>(C_);
  const double v = config_.uses_mla() ? static_cast<double>(NH_ * mla.v_head_dim) : static_cast<double>(C_);
  return 6.0 * n + 6.0 * static_cast<double>(config_.blocks() * T_) * (qk + v);
}

std::unique_ptr<Model> make_model(const ModelConfig& config, int64_t batch_size, k::Device device,
                                  const std::string& precision, TpGroup tp, const ModelStage& stage,
                                  ParamStore* shared, TpGroup ep) {
  if (config.llama()) {
    // Expert parallelism: this rank holds its own experts only.
    ModelStage own = stage;
    if (ep.parallel()) {
      own.expert_rank = ep.rank();
      own.expert_ranks = ep.size();
    }
    return std::make_unique<Llama>(config, batch_size, device, precision, tp, own, shared, ep);
  }
  return std::make_unique<Gpt>(config, batch_size, device, precision, tp, stage, shared);
}

}  // namespace precon::worker
