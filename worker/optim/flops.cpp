// The optimizers' FLOPs per step (flops.h), mirroring how worker/optim/*.cpp route the parameters
// and what each step computes.
#include "worker/optim/flops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "worker/optim/optimizer.h"

namespace precon::worker {

FlopSplit& FlopSplit::operator+=(const FlopSplit& o) {
  matmul += o.matmul;
  decomposition += o.decomposition;
  elementwise += o.elementwise;
  return *this;
}

FlopSplit operator+(FlopSplit a, const FlopSplit& b) { return a += b; }

FlopSplit operator*(double k, const FlopSplit& a) { return {k * a.matmul, k * a.decomposition, k * a.elementwise}; }

namespace {

double d(int64_t v) { return static_cast<double>(v); }

// 2·m·n·k for an (m×k)(k×n) product.
double product(int64_t m, int64_t n, int64_t k) { return 2.0 * d(m) * d(n) * d(k); }

FlopSplit elementwise(double flops) { return {0, 0, flops}; }

// The factor statistics of the sides given: L ← β·L + w·G Gᵀ (left), R ← β·R + w·Gᵀ G (right).
FlopSplit statistics(int64_t rows, int64_t cols, bool left, bool right) {
  FlopSplit f;
  if (left) f += {product(rows, rows, cols), 0, kFactorEmaPerElement * d(rows) * d(rows)};
  if (right) f += {product(cols, cols, rows), 0, kFactorEmaPerElement * d(cols) * d(cols)};
  return f;
}

FlopSplit eigh(int64_t n) { return {0, kEighCube * d(n) * d(n) * d(n), 0}; }

// The AdamW group: every parameter that is not routed elsewhere.
FlopSplit adamw_group(double numel, bool cautious) {
  return elementwise(numel * (kAdamWPerElement + (cautious ? kCautiousPerElement : 0.0)));
}

// W ← W·(1 − lr·wd) − lr·scale·D over n elements.
FlopSplit apply_update(double numel, bool cautious) {
  return elementwise(numel * (kAxpbyPerElement + (cautious ? kCautiousPerElement : 0.0)));
}

bool is_cautious(const OptimizerConfig& c) { return c.weight_decay_mode == "cautious"; }

// Muon's schedule as muon.cpp builds it (ns_options).
std::vector<kernels::NsCoefficients> muon_schedule(const MuonConfig& c) {
  if (c.coefficients != "explicit") return kernels::ns_schedule(c.coefficients, static_cast<int>(c.ns_steps));
  std::vector<kernels::NsCoefficients> set;
  for (const auto& t : c.coefficient_list)
    set.push_back({static_cast<float>(t[0]), static_cast<float>(t[1]), static_cast<float>(t[2])});
  return kernels::ns_schedule(set, static_cast<int>(c.ns_steps));
}

// One Muon matrix: its Newton–Schulz problems as muon.cpp forms them (Q/K/V blocks under split_qkv;
// under tp_mode = blockwise each block's tensor-parallel parts; under split_heads an attention
// matrix's heads, each within one part), momentum, NorMuon, the update.
FlopSplit muon_matrix(const ParamSpec& s, const OptimizerConfig& config, const std::vector<kernels::NsCoefficients>& schedule,
                      int64_t tensor) {
  const MuonConfig& c = config.muon;
  const int64_t rows = s.shape[0], cols = s.shape[1], numel = rows * cols;
  const int qkv = std::max(1, s.qkv_blocks);
  const int qkv_dim = s.stored_in_out ? 1 : 0;
  const bool by_head = c.split_heads && s.heads > 0;
  const int64_t blocks = by_head ? (s.heads_on_fan_in ? 1 : qkv) * s.heads : c.split_qkv ? qkv : 1;
  const bool per_part = !by_head && tensor > 1 && c.tp_mode == "blockwise" && s.tp_split_dim >= 0;
  const int dim = per_part ? s.tp_split_dim : by_head && s.heads_on_fan_in ? 1 - qkv_dim : qkv_dim;
  const int64_t problems = blocks * (per_part ? tensor : 1);
  const int64_t len = s.shape[static_cast<size_t>(dim)] / problems;
  FlopSplit f = d(problems) * newton_schulz_flops(dim == 0 ? len : rows, dim == 0 ? cols : len, schedule);
  f += elementwise(kAxpbyPerElement * d(numel) * (c.nesterov ? 2.0 : 1.0));
  if (c.variant == "normuon")
    f += elementwise(kNorMuonPerElement * d(numel) + kNorMuonPerNeuron * d(s.shape[static_cast<size_t>(qkv_dim)]));
  return f + apply_update(d(numel), is_cautious(config));
}

bool shampoo_routed(const ParamSpec& s, bool all_matrices) {
  if (s.kind == ParamKind::matrix) return true;
  return all_matrices && s.shape.size() == 2 && (s.kind == ParamKind::embedding || s.kind == ParamKind::position);
}

std::vector<int64_t> chunk_lengths(int64_t n, int64_t size) {
  std::vector<int64_t> out;
  for (int64_t start = 0; start < n; start += size) out.push_back(std::min(size, n - start));
  return out;
}

void require_2d(const ParamSpec& s, const std::string& optimizer) {
  if (s.shape.size() != 2) throw OptimizerError(optimizer + " flops: " + s.name + " is routed but not 2-D");
}

}  // namespace

FlopSplit newton_schulz_flops(int64_t rows, int64_t cols, const std::vector<kernels::NsCoefficients>& schedule) {
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  FlopSplit f = elementwise((kNormPerElement + kScalePerElement) * d(m) * d(n));
  for (const kernels::NsCoefficients& k : schedule) {
    const bool quintic = k.c != 0.0f;
    f.matmul += product(m, m, n) + (quintic ? product(m, m, m) : 0.0) + product(m, n, m);
    f.elementwise += (quintic ? 3.0 : 1.0) * d(m) * d(m) + 2.0 * d(m) * d(n);
  }
  return f;
}

FlopSplit shampoo_statistics_flops(int64_t rows, int64_t cols) { return statistics(rows, cols, true, true); }

FlopSplit shampoo_precondition_flops(int64_t rows, int64_t cols) {
  return {product(rows, cols, rows) + product(rows, cols, cols), 0, 0};
}

FlopSplit inverse_root_flops(int64_t n, const RootFlopOptions& o) {
  const double nn = d(n) * d(n);
  FlopSplit f = elementwise(o.bias_corrected ? nn : 0.0);
  if (!o.newton) {
    f += eigh(n);
    f.matmul += kEigenReconstructCube * nn * d(n);
    f.elementwise += kEigenvaluePerValue * d(n) + kScalePerElement * nn;
    return f;
  }
  // Coupled Newton (kernels/inverse_root.cpp): A + εI, its norm, M and X scaled, the residual
  // (12n²); per iteration T = ((p+1)I − M)/p (3n²), X·T, T^p, T^p·M, the residual (5n²). The
  // kernel's T^p starts from a product with the identity, one more product than needed: not counted.
  const auto p = static_cast<uint64_t>(std::max(1.0, std::round(o.p)));
  const int powers = std::bit_width(p) - 1 + std::popcount(p) - 1;
  f.elementwise += 12.0 * nn;
  f.matmul += d(o.newton_iterations) * (2.0 + powers) * product(n, n, n);
  f.elementwise += d(o.newton_iterations) * 8.0 * nn;
  return f;
}

FlopSplit soap_rotation_flops(int64_t rows, int64_t cols, bool left, bool right) {
  return {(left ? product(rows, cols, rows) : 0.0) + (right ? product(rows, cols, cols) : 0.0), 0, 0};
}

FlopSplit soap_refresh_side_flops(int64_t n) {
  return {product(n, n, n), kQrCube * d(n) * d(n) * d(n), kSoapEstimatePerElement * d(n) * d(n)};
}

OptimizerFlopCount::OptimizerFlopCount(const OptimizerConfig& config, const std::vector<ParamSpec>& table,
                                       const FlopOptions& options) {
  const bool cautious = is_cautious(config);
  double side = 0;  // elements of the AdamW group
  if (config.name == "adamw") {
    for (const ParamSpec& s : table) side += d(s.numel());
  } else if (config.name == "muon") {
    const std::vector<kernels::NsCoefficients> schedule = muon_schedule(config.muon);
    for (const ParamSpec& s : table) {
      if (s.kind != ParamKind::matrix) {
        side += d(s.numel());
        continue;
      }
      require_2d(s, "muon");
      every_ += muon_matrix(s, config, schedule, std::max<int64_t>(1, options.tensor));
    }
  } else if (config.name == "shampoo") {
    const ShampooConfig& c = config.shampoo;
    schedule_ = Schedule::shampoo;
    frequency_ = c.precondition_frequency;
    start_ = c.start_preconditioning_step > 0 ? c.start_preconditioning_step : c.precondition_frequency;
    const bool all_matrices = c.params == "all-matrices";
    const bool adam_like = c.grafting == "adam" || c.grafting == "rmsprop";
    const bool grafted = c.grafting != "none";
    RootFlopOptions root;
    root.newton = c.root_method == "newton";
    root.p = 1.0 / (c.exponent > 0 ? c.exponent : 0.25);
    root.newton_iterations = options.newton_iterations;
    root.bias_corrected = c.bias_correction && c.beta2 < 1.0;
    for (const ParamSpec& s : table) {
      if (!shampoo_routed(s, all_matrices)) {
        side += d(s.numel());
        continue;
      }
      require_2d(s, "shampoo");
      for (int64_t rn : chunk_lengths(s.shape[0], c.max_preconditioner_dim)) {
        for (int64_t cn : chunk_lengths(s.shape[1], c.max_preconditioner_dim)) {
          const double numel = d(rn) * d(cn);
          every_ += shampoo_statistics_flops(rn, cn);
          // Momentum and the grafting direction (adam/rmsprop: one adamw_update), Ĝ = M / bc1, ‖P_graft‖.
          double e = adam_like ? kAdamWPerElement : kAxpbyPerElement + (c.grafting == "adagrad" ? kAdagradPerElement : 0.0);
          if (c.bias_correction && c.beta1 != 0.0) e += kScalePerElement;
          if (grafted) e += kNormPerElement;
          every_ += elementwise(e * numel) + apply_update(numel, cautious);
          from_start_ += shampoo_precondition_flops(rn, cn);
          if (grafted) from_start_ += elementwise((kNormPerElement + kScalePerElement) * numel);
          refresh_ += inverse_root_flops(rn, root) + inverse_root_flops(cn, root);
        }
      }
    }
  } else if (config.name == "soap") {
    const SoapConfig& c = config.soap;
    schedule_ = Schedule::soap;
    frequency_ = c.precondition_frequency;
    start_ = 2;  // step 1 only builds the factors and their bases
    for (const ParamSpec& s : table) {
      if (s.kind != ParamKind::matrix) {
        side += d(s.numel());
        continue;
      }
      require_2d(s, "soap");
      const int64_t rows = s.shape[0], cols = s.shape[1];
      const double numel = d(rows) * d(cols);
      const bool left = rows <= c.max_preconditioner_dim, right = cols <= c.max_preconditioner_dim;
      const FlopSplit factors = statistics(rows, cols, left, right);
      first_extra_ += factors;
      if (left) first_extra_ += eigh(rows);
      if (right) first_extra_ += eigh(cols);
      // Ĝ = Q_Lᵀ G Q_R, Adam on it, D = Q_L (M/(√V + ε)) Q_Rᵀ, the factors, the update.
      from_start_ += 2.0 * soap_rotation_flops(rows, cols, left, right) + factors +
                     elementwise(numel * (kAdamWPerElement + (c.normalize_grads ? kNormPerElement + kScalePerElement : 0.0))) +
                     apply_update(numel, cautious);
      // M back to the standard basis and into the new one; each rotated side's power step and QR.
      refresh_ += 2.0 * soap_rotation_flops(rows, cols, left, right);
      if (left) refresh_ += soap_refresh_side_flops(rows);
      if (right) refresh_ += soap_refresh_side_flops(cols);
    }
  } else {
    throw OptimizerError("optimizer flops: unknown optimizer.name '" + config.name +
                         "' (known: adamw, muon, shampoo, soap)");
  }
  if (schedule_ != Schedule::none && frequency_ < 1) {
    throw OptimizerError("optimizer flops: precondition_frequency must be >= 1, got " + std::to_string(frequency_));
  }
  every_ += adamw_group(side, cautious);
}

bool OptimizerFlopCount::refresh_at(int64_t t) const {
  switch (schedule_) {
    case Schedule::shampoo: return t == start_ || (t > start_ && t % frequency_ == 0);
    case Schedule::soap: return t >= 2 && (t - 1) % frequency_ == 0;
    case Schedule::none: break;
  }
  return false;
}

int64_t OptimizerFlopCount::refreshes_through(int64_t t) const {
  switch (schedule_) {
    case Schedule::shampoo: return t < start_ ? 0 : 1 + t / frequency_ - start_ / frequency_;
    case Schedule::soap: return t < 2 ? 0 : (t - 1) / frequency_;
    case Schedule::none: break;
  }
  return 0;
}

FlopSplit OptimizerFlopCount::at(int64_t step) const {
  if (step < 1) return {};
  FlopSplit f = every_;
  if (step >= start_) f += from_start_;
  if (step == 1) f += first_extra_;
  if (refresh_at(step)) f += refresh_;
  return f;
}

FlopSplit OptimizerFlopCount::through(int64_t step) const {
  if (step < 1) return {};
  return d(step) * every_ + d(std::max<int64_t>(0, step - start_ + 1)) * from_start_ + first_extra_ +
         d(refreshes_through(step)) * refresh_;
}

OptimizerFlops OptimizerFlopCount::summary() const {
  OptimizerFlops s;
  s.step = every_ + from_start_;
  s.refresh = refresh_;
  s.refresh_every = schedule_ == Schedule::none ? 0 : frequency_;
  s.first = at(1);
  return s;
}

}  // namespace precon::worker
