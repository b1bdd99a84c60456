// AdamW with PyTorch semantics over a group of parameters (kernels::adamw_update), used alone for
// name = "adamw" and as the side group of Muon and Shampoo runs.
#include "kernels/nn.h"
#include "worker/optim/optim_internal.h"

namespace precon::worker::optim {

using kernels::Tensor;

AdamWHyper adamw_hyper(const OptimizerConfig& config, bool adamw_run) {
  AdamWHyper h;
  h.beta1 = config.adamw.beta1;
  h.beta2 = config.adamw.beta2;
  h.eps = config.adamw.eps;
  h.cautious = cautious_decay(config);
  if (adamw_run) {
    h.lr = config.lr;
    h.weight_decay = config.weight_decay;
  } else {
    h.lr = config.adamw.lr > 0 ? config.adamw.lr : config.lr;
    h.weight_decay = config.adamw.weight_decay >= 0 ? config.adamw.weight_decay : config.weight_decay;
  }
  if (!(h.beta1 >= 0 && h.beta1 < 1) || !(h.beta2 >= 0 && h.beta2 < 1) || !(h.eps >= 0)) {
    throw OptimizerError("optimizer.adamw: betas must lie in [0, 1) and eps >= 0 (beta1 = " +
                         std::to_string(h.beta1) + ", beta2 = " + std::to_string(h.beta2) +
                         ", eps = " + std::to_string(h.eps) + ")");
  }
  return h;
}

AdamWGroup::AdamWGroup(const std::vector<OptimParam>& params, const AdamWHyper& hyper, kernels::Device device)
    : hyper_(hyper) {
  for (const OptimParam& p : params) {
    exp_avg_.add(p.spec->name, -1, p.spec->shape);
    exp_avg_sq_.add(p.spec->name, -1, p.spec->shape);
  }
  exp_avg_.allocate(device);
  exp_avg_sq_.allocate(device);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = *params[i].spec;
    params_.push_back({spec.name, visible(params[i].param, spec), visible(params[i].grad, spec), exp_avg_.get(i),
                       exp_avg_sq_.get(i)});
  }
}

void AdamWGroup::step(const StepContext& ctx) {
  kernels::AdamWParams hp;
  hp.lr = static_cast<float>(hyper_.lr * ctx.lr_scale);
  hp.beta1 = static_cast<float>(hyper_.beta1);
  hp.beta2 = static_cast<float>(hyper_.beta2);
  hp.eps = static_cast<float>(hyper_.eps);
  hp.weight_decay = static_cast<float>(hyper_.weight_decay);
  hp.step = static_cast<int>(ctx.step);
  hp.grad_scale = ctx.grad_scale;
  hp.cautious = hyper_.cautious;
  for (Entry& e : params_) kernels::adamw_update(e.param, e.grad, e.exp_avg, e.exp_avg_sq, hp);
}

void AdamWGroup::append_state(std::vector<NamedState>& out, bool primary) const {
  const size_t first = out.size();
  exp_avg_.append_tensors(out);
  exp_avg_sq_.append_tensors(out);
  for (size_t i = first; i < out.size(); ++i) out[i].primary = primary;
}

void AdamWGroup::append_kinds(std::vector<StateKind>& out) const {
  exp_avg_.append_kind(out);
  exp_avg_sq_.append_kind(out);
}

int64_t AdamWGroup::numel() const {
  int64_t n = 0;
  for (const Entry& e : params_) n += e.param.numel();
  return n;
}

namespace {

class AdamW final : public Optimizer {
 public:
  // Every rank updates every parameter (element-wise, cheap); the first rank of `group` writes the state.
  AdamW(const OptimizerConfig& config, const std::vector<OptimParam>& params, kernels::Device device,
        Communicator* group)
      : device_(device), primary_(!group || group->rank() == 0), group_(params, adamw_hyper(config, true), device) {}

  void step(const StepContext& ctx) override {
    PhaseTimer timer(phases_.adamw, device_);
    group_.step(ctx);
  }
  std::vector<NamedState> state_tensors() override {
    std::vector<NamedState> out;
    group_.append_state(out, primary_);
    return out;
  }
  std::vector<StateKind> state_kinds() const override {
    std::vector<StateKind> out;
    group_.append_kinds(out);
    return out;
  }
  nlohmann::json state_scalars() const override { return nlohmann::json::object(); }
  void load_state_scalars(const nlohmann::json&) override {}
  PhaseSeconds phase_seconds() const override { return phases_; }
  std::string routing_summary() const override { return route_text("adamw", group_.tensors(), group_.numel()); }

 private:
  kernels::Device device_;
  bool primary_;
  AdamWGroup group_;
  PhaseSeconds phases_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                      kernels::Device device, const OptimizerHooks& hooks) {
  return std::make_unique<AdamW>(config, params, device, hooks.group);
}

}  // namespace precon::worker::optim
