// AdamW with PyTorch semantics over a group of parameters (kernels::adamw_update), used alone for
// name = "adamw" and as the side group of Muon and Shampoo runs.
#include <algorithm>

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

AdamWGroup::AdamWGroup(const std::vector<OptimParam>& params, const AdamWHyper& hyper, kernels::Device device,
                       const RangePlanner& ranges)
    : hyper_(hyper), device_(device) {
  for (const OptimParam& p : params) {
    const ParamSpec held = held_spec(p);
    index_[p.spec->name] = params_.size();
    params_.push_back({p.spec->name, visible(p.param, held), visible(p.grad, held), total_, p.spec, p.tp});
    total_ += params_.back().param.numel();
  }
  if (ranges) ranges_ = ranges(total_, device);
  lo_ = ranges_ ? ranges_->lo() : 0;
  hi_ = ranges_ ? ranges_->hi() : total_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Entry& e = params_[i];
    const int64_t first = std::max(lo_, e.start), end = std::min(hi_, e.start + e.param.numel());
    if (first < end) add_pieces(i, first - e.start, end - e.start);
  }
  exp_avg_.allocate(device);
  exp_avg_sq_.allocate(device);
}

void AdamWGroup::add_pieces(size_t entry, int64_t first, int64_t end) {
  const Entry& e = params_[entry];
  const std::vector<int64_t> global(e.param.shape.begin(), e.param.shape.begin() + e.param.ndim);
  auto add = [&](int64_t at, int64_t n, std::vector<int64_t> shape, std::vector<int64_t> offset) {
    Piece p;
    p.entry = entry;
    p.first = at;
    p.n = n;
    const bool whole = at == 0 && n == e.param.numel();
    p.state = exp_avg_.add(e.name, -1, whole ? global : shape, whole ? std::vector<int64_t>{} : global,
                           whole ? std::vector<int64_t>{} : offset);
    exp_avg_sq_.add(e.name, -1, whole ? global : shape, whole ? std::vector<int64_t>{} : global,
                    whole ? std::vector<int64_t>{} : offset);
    pieces_.push_back(p);
  };
  if (e.param.ndim != 2) {
    add(first, end - first, {end - first}, {first});
    return;
  }
  // Boxes of whole rows where it can: a partial first row, the whole rows, a partial last row.
  const int64_t cols = e.param.shape[1];
  int64_t at = first;
  if (at % cols != 0) {
    const int64_t n = std::min(end, (at / cols + 1) * cols) - at;
    add(at, n, {1, n}, {at / cols, at % cols});
    at += n;
  }
  if (end - at >= cols) {
    const int64_t rows = (end - at) / cols;
    add(at, rows * cols, {rows, cols}, {at / cols, 0});
    at += rows * cols;
  }
  if (at < end) add(at, end - at, {1, end - at}, {at / cols, 0});
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
  for (const Piece& p : pieces_) {
    const Entry& e = params_[p.entry];
    if (!ranges_) {  // whole parameters, in their shapes
      kernels::adamw_update(e.param, e.grad, exp_avg_.get(p.state), exp_avg_sq_.get(p.state), hp);
      continue;
    }
    auto flat = [&](const Tensor& t) { return make_view(t.f32() + p.first, {p.n}, device_); };
    kernels::adamw_update(flat(e.param), flat(e.grad), make_view(exp_avg_.get(p.state).f32(), {p.n}, device_),
                          make_view(exp_avg_sq_.get(p.state).f32(), {p.n}, device_), hp);
  }
  if (ranges_) {
    ranges_->share([this](int64_t from, int64_t to, float* buf, bool into_buf) { copy_values(from, to, buf, into_buf); });
  }
}

void AdamWGroup::copy_values(int64_t from, int64_t to, float* buf, bool into_buf) const {
  // The first parameter that ends after `from` (parameters are in concatenation order).
  size_t i = static_cast<size_t>(std::upper_bound(params_.begin(), params_.end(), from,
                                                  [](int64_t v, const Entry& e) { return v < e.start; }) -
                                 params_.begin());
  i = i > 0 ? i - 1 : 0;
  for (; i < params_.size() && from < to; ++i) {
    const Entry& e = params_[i];
    const int64_t end = std::min(to, e.start + e.param.numel());
    if (end <= from) continue;
    const int64_t n = end - from;
    Tensor value = make_view(e.param.f32() + (from - e.start), {n}, device_);
    Tensor packed = make_view(buf, {n}, device_);
    if (into_buf) kernels::copy(packed, value);
    else kernels::copy(value, packed);
    buf += n;
    from = end;
  }
}

std::vector<int> AdamWGroup::roots() const {
  std::vector<int> out(params_.size(), -1);
  if (!ranges_) return out;
  for (size_t i = 0; i < params_.size(); ++i) out[i] = ranges_->root(params_[i].start, params_[i].param.numel());
  return out;
}

void AdamWGroup::append_state(std::vector<NamedState>& out, bool primary) const {
  std::vector<NamedState> mine;
  exp_avg_.append_tensors(mine);
  exp_avg_sq_.append_tensors(mine);
  for (NamedState& s : mine) {
    const Entry& e = params_[index_.at(s.param)];
    const bool split = e.tp.size > 1 && e.spec->tp_split_dim >= 0;
    // A replicated row's state is the same on every tensor-parallel rank: the first writes it.
    s.primary = (ranges_ ? true : primary) && (split || e.tp.rank == 0);
    append_in_full(*e.spec, split ? e.tp : TpPlace{}, std::move(s), out);
  }
}

void AdamWGroup::append_kinds(std::vector<StateKind>& out) const {
  exp_avg_.append_kind(out);
  exp_avg_sq_.append_kind(out);
}

std::vector<int> merge_roots(const std::vector<OptimParam>& params, const std::vector<int>& matrix_roots,
                             const AdamWGroup& adamw) {
  std::vector<int> out = matrix_roots.empty() ? std::vector<int>(params.size(), -1) : matrix_roots;
  const std::vector<int> side = adamw.roots();
  // The AdamW group's parameters are a subsequence of `params` (in order).
  size_t j = 0;
  for (size_t i = 0; i < params.size() && j < side.size(); ++i) {
    if (params[i].spec->name != adamw.param_name(j)) continue;
    out[i] = side[j++];
  }
  if (std::all_of(out.begin(), out.end(), [](int r) { return r < 0; })) return {};
  return out;
}

namespace {

class AdamW final : public Optimizer {
 public:
  // Every rank updates every parameter (element-wise, cheap) and the first rank of `group` writes
  // the state, or with hooks.distribute_elementwise each rank updates and writes its own range.
  AdamW(const OptimizerConfig& config, const std::vector<OptimParam>& params, kernels::Device device,
        const OptimizerHooks& hooks)
      : device_(device), primary_(!hooks.replica_group() || hooks.replica_group()->index() == 0),
        group_(params, adamw_hyper(config, true), device, hooks.distribute_elementwise ? hooks.ranges : nullptr),
        roots_(merge_roots(params, {}, group_)) {}

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
  int64_t comm_bytes() const override { return group_.comm_bytes(); }
  std::vector<int> gradient_roots() const override { return roots_; }
  std::string routing_summary() const override { return route_text("adamw", group_.tensors(), group_.numel()); }

 private:
  kernels::Device device_;
  bool primary_;
  AdamWGroup group_;
  std::vector<int> roots_;
  PhaseSeconds phases_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                      kernels::Device device, const OptimizerHooks& hooks) {
  return std::make_unique<AdamW>(config, params, device, hooks);
}

}  // namespace precon::worker::optim
