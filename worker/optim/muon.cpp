// Muon (OPTIMIZERS.md "Muon step") for the 2-D hidden matrices; every other parameter goes to the
// AdamW side group. Per matrix W with gradient G (s = ctx.grad_scale, μ = momentum):
//   ema: M ← μM + (1−μ)sG ; U = nesterov ? (1−μ)sG + μM : M
//   sgd: M ← μM + sG      ; U = nesterov ? sG + μM      : M
//   O = NS(U)  (split_qkv: the Q, K, V blocks of attn.c_attn separately)
//   W ← W·(1 − lr·wd) − lr·scale·O
// NS(Xᵀ) = NS(X)ᵀ, so the storage matrix is orthogonalised as stored; only the scale uses the
// linear map's (fan_out, fan_in), per block when split.
#include <algorithm>
#include <cmath>

#include "kernels/linalg.h"
#include "kernels/newton_schulz.h"
#include "worker/optim/optim_internal.h"
#include "worker/optim/ownership.h"

namespace precon::worker::optim {

using kernels::Tensor;

namespace {

double muon_scale(const std::string& mode, double fan_out, double fan_in) {
  if (mode == "shape") return std::sqrt(std::max(1.0, fan_out / fan_in));
  if (mode == "rms-match") return 0.2 * std::sqrt(std::max(fan_out, fan_in));
  if (mode == "spectral") return std::sqrt(fan_out / fan_in);
  throw OptimizerError("unknown optimizer.muon.scale '" + mode + "' (known: shape, rms-match, spectral)");
}

kernels::NsOptions ns_options(const MuonConfig& c, kernels::Device device) {
  // Values were checked by make_optimizer against the key table; a named set comes from the kernels.
  std::vector<kernels::NsCoefficients> set;
  if (c.coefficients == "explicit") {
    for (const auto& t : c.coefficient_list) {
      set.push_back({static_cast<float>(t[0]), static_cast<float>(t[1]), static_cast<float>(t[2])});
    }
  } else {
    set = kernels::ns_coefficient_set(c.coefficients);
  }
  kernels::NsOptions o;
  o.schedule = kernels::ns_schedule(set, static_cast<int>(c.ns_steps));
  o.eps = static_cast<float>(c.ns_eps);
  if (c.ns_precision == "auto") {
    o.compute = device == kernels::Device::cuda ? kernels::DType::bf16 : kernels::DType::f32;
  } else if (c.ns_precision == "fp32") {
    o.compute = kernels::DType::f32;
  } else if (c.ns_precision == "bf16") {
    if (device != kernels::Device::cuda) {
      throw OptimizerError("optimizer.muon.ns_precision = \"bf16\" needs the CUDA device; use \"auto\" or \"fp32\"");
    }
    o.compute = kernels::DType::bf16;
  } else {
    throw OptimizerError("unknown optimizer.muon.ns_precision '" + c.ns_precision + "' (known: auto, fp32, bf16)");
  }
  return o;
}

std::vector<OptimParam> select(const std::vector<OptimParam>& params, bool matrices) {
  std::vector<OptimParam> out;
  for (const OptimParam& p : params) {
    if ((p.spec->kind == ParamKind::matrix) == matrices) out.push_back(p);
  }
  return out;
}

class Muon final : public Optimizer {
 public:
  Muon(const OptimizerConfig& config, const std::vector<OptimParam>& params, kernels::Device device,
       Communicator* group)
      : group_(group && group->size() > 1 ? group : nullptr),
        config_(config.muon),
        lr_(config.lr),
        weight_decay_(config.weight_decay),
        device_(device),
        ns_(ns_options(config.muon, device)),
        adamw_(select(params, false), adamw_hyper(config, false), device) {
    if (config_.momentum_form != "ema" && config_.momentum_form != "sgd") {
      throw OptimizerError("unknown optimizer.muon.momentum_form '" + config_.momentum_form + "' (known: ema, sgd)");
    }
    if (!(config_.momentum >= 0 && config_.momentum < 1)) {
      throw OptimizerError("optimizer.muon.momentum must lie in [0, 1)");
    }
    int64_t work = 1;
    for (const OptimParam& p : select(params, true)) {
      const ParamSpec& s = *p.spec;
      if (s.shape.size() != 2 || s.fan_in <= 0 || s.fan_out <= 0) {
        throw OptimizerError("muon: " + s.name + " is routed as a matrix but has no 2-D shape / fan dims");
      }
      Matrix m;
      m.name = s.name;
      m.param = visible(p.param, s);
      m.grad = visible(p.grad, s);
      m.in_out = s.stored_in_out;
      m.fan_in = s.fan_in;
      m.fan_out = s.fan_out;
      m.blocks = config_.split_qkv ? std::max(1, s.qkv_blocks) : 1;
      if (s.fan_out % m.blocks != 0) {
        throw OptimizerError("muon: " + s.name + " fan_out " + std::to_string(s.fan_out) + " is not divisible into " +
                             std::to_string(m.blocks) + " q/k/v blocks");
      }
      m.scale = muon_scale(config_.scale, static_cast<double>(s.fan_out / m.blocks), static_cast<double>(s.fan_in));
      momentum_.add(s.name, -1, s.shape);
      work = std::max(work, s.numel());
      matrices_.push_back(std::move(m));
    }
    momentum_.allocate(device);
    for (size_t i = 0; i < matrices_.size(); ++i) matrices_[i].momentum = momentum_.get(i);
    work_ = kernels::Buffer(device, static_cast<size_t>(2 * work) * sizeof(float));
    if (group_) share_the_work(device);
  }

  void step(const StepContext& ctx) override {
    {
      PhaseTimer timer(phases_.adamw, device_);
      adamw_.step(ctx);
    }
    const double lr = lr_ * ctx.lr_scale;
    if (!group_) {
      for (Matrix& m : matrices_) update(m, ctx, lr);
      return;
    }
    // Each rank orthogonalises the matrices it owns into their slot of one buffer (zeros in the
    // others' slots); one sum over the group then hands every rank every result, and all apply
    // them alike. The momenta stay replicated: every rank updates all of them.
    for (Matrix& m : matrices_) {
      Tensor o = orthogonalised(m, ctx, m.owner == group_->rank());
      if (m.owner == group_->rank()) kernels::copy(m.shared, o);
      else kernels::fill_zero(m.shared);
    }
    {
      PhaseTimer timer(phases_.communication, device_);
      group_->all_reduce_sum(static_cast<float*>(shared_.data()), shared_numel_);
    }
    PhaseTimer timer(phases_.other, device_);
    for (Matrix& m : matrices_) apply(m, m.shared, lr);
  }

  // This rank's share of the Newton–Schulz work, for the start-up log.
  std::string ownership_summary() const {
    if (!group_) return "";
    int64_t mine = 0;
    for (const Matrix& m : matrices_) mine += m.owner == group_->rank();
    return "muon: rank " + std::to_string(group_->rank()) + " orthogonalises " + std::to_string(mine) + " of " +
           std::to_string(matrices_.size()) + " matrices";
  }

  std::vector<NamedState> state_tensors() override {
    std::vector<NamedState> out;
    momentum_.append_tensors(out);
    adamw_.append_state(out);
    return out;
  }
  std::vector<StateKind> state_kinds() const override {
    std::vector<StateKind> out;
    momentum_.append_kind(out);
    adamw_.append_kinds(out);
    return out;
  }
  nlohmann::json state_scalars() const override { return nlohmann::json::object(); }
  void load_state_scalars(const nlohmann::json&) override {}
  PhaseSeconds phase_seconds() const override { return phases_; }
  std::string routing_summary() const override {
    int64_t n = 0;
    for (const Matrix& m : matrices_) n += m.param.numel();
    return route_text("muon", matrices_.size(), n) + "; " + route_text("adamw", adamw_.tensors(), adamw_.numel()) +
           (group_ ? "; " + ownership_summary() : "");
  }

 private:
  struct Matrix {
    std::string name;
    Tensor param, grad, momentum;
    Tensor shared;  // with a group: this matrix's slot in the buffer the owners' results are summed in
    int owner = 0;
    bool in_out = false;
    int64_t fan_in = 0, fan_out = 0;
    int blocks = 1;
    double scale = 1.0;
  };

  void share_the_work(kernels::Device device) {
    std::vector<double> cost;
    for (const Matrix& m : matrices_) {
      const int64_t rows = m.fan_out / m.blocks, cols = m.fan_in;
      cost.push_back(m.blocks * newton_schulz_cost(rows, cols));
    }
    const std::vector<int> owner = assign_owners(cost, group_->size());
    for (const Matrix& m : matrices_) shared_numel_ += m.param.numel();
    shared_ = kernels::Buffer(device, static_cast<size_t>(shared_numel_) * sizeof(float));
    int64_t offset = 0;
    for (size_t i = 0; i < matrices_.size(); ++i) {
      Matrix& m = matrices_[i];
      m.owner = owner[i];
      m.shared = Tensor::view(static_cast<float*>(shared_.data()) + offset, {m.param.shape[0], m.param.shape[1]},
                              kernels::DType::f32, device);
      offset += m.param.numel();
    }
  }

  void update(Matrix& m, const StepContext& ctx, double lr) { apply(m, orthogonalised(m, ctx, true), lr); }

  void apply(Matrix& m, const Tensor& o, double lr) {
    kernels::axpby(m.param, o, static_cast<float>(-lr * m.scale), static_cast<float>(1.0 - lr * weight_decay_));
  }

  // The momentum update (always), then with `orthogonalise` the Newton–Schulz of the update
  // direction, returned in work memory.
  Tensor orthogonalised(Matrix& m, const StepContext& ctx, bool orthogonalise) {
    const int64_t rows = m.param.shape[0], cols = m.param.shape[1];
    float* work = static_cast<float*>(work_.data());
    Tensor u = Tensor::view(work, {rows, cols}, kernels::DType::f32, device_);
    Tensor t = Tensor::view(work + rows * cols, {rows, cols}, kernels::DType::f32, device_);
    const float mu = static_cast<float>(config_.momentum);
    const float g_weight = config_.momentum_form == "ema" ? (1.0f - mu) * ctx.grad_scale : ctx.grad_scale;
    Tensor source = m.momentum;
    {
      PhaseTimer timer(phases_.other, device_);
      kernels::axpby(m.momentum, m.grad, g_weight, mu);
      if (config_.nesterov) {
        kernels::copy(u, m.grad);
        kernels::axpby(u, m.momentum, mu, g_weight);
        source = u;
      }
    }
    Tensor o;
    if (!orthogonalise) return o;
    {
      PhaseTimer timer(phases_.newton_schulz, device_);
      if (m.blocks == 1) {
        kernels::newton_schulz(t, source, ns_);
        o = t;
      } else if (m.in_out) {
        // (fan_in, fan_out) storage: the blocks are column ranges; transposed they are contiguous.
        const int64_t block = m.fan_out / m.blocks;
        Tensor tt = Tensor::view(t.data, {cols, rows}, kernels::DType::f32, device_);
        kernels::transpose(tt, source);
        kernels::newton_schulz(Tensor::view(t.data, {m.blocks, block, rows}, kernels::DType::f32, device_),
                               Tensor::view(t.data, {m.blocks, block, rows}, kernels::DType::f32, device_), ns_);
        kernels::transpose(u, tt);
        o = u;
      } else {
        const int64_t block = m.fan_out / m.blocks;
        kernels::newton_schulz(Tensor::view(t.data, {m.blocks, block, cols}, kernels::DType::f32, device_),
                               Tensor::view(source.data, {m.blocks, block, cols}, kernels::DType::f32, device_), ns_);
        o = t;
      }
    }
    return o;
  }

  Communicator* group_;
  MuonConfig config_;
  double lr_, weight_decay_;
  kernels::Device device_;
  kernels::NsOptions ns_;
  AdamWGroup adamw_;
  std::vector<Matrix> matrices_;
  StateBuffer momentum_{"momentum"};
  kernels::Buffer work_;
  kernels::Buffer shared_;
  int64_t shared_numel_ = 0;
  PhaseSeconds phases_;
};

}  // namespace

std::unique_ptr<Optimizer> make_muon(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                     kernels::Device device, const OptimizerHooks& hooks) {
  return std::make_unique<Muon>(config, params, device, hooks.group);
}

}  // namespace precon::worker::optim
