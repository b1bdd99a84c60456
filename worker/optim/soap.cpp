// SOAP (Vyas et al. 2024; docs/optimizers.md, SOAP): Adam run in the eigenbasis of
// Shampoo's factors, for the 2-D hidden matrices; every other parameter goes to the AdamW side
// group. Per matrix W (m × n as stored) with gradient G, s = ctx.grad_scale, k = ctx.step − 1 (the
// updates made so far), βs = shampoo_beta (−1: β2), sides longer than max_preconditioner_dim
// left unrotated (their Q is the identity and they keep no factor):
//   step 1 (k = 0): L = (1 − βs)(sG)(sG)ᵀ, R = (1 − βs)(sG)ᵀ(sG); Q_L, Q_R their eigenvectors
//                   (eigh, eigenvalues descending); W is not changed (no update, no decay).
//   later steps:    Ĝ = Q_Lᵀ (sG) Q_R
//                   M ← β1·M + (1−β1)·Ĝ ;  V ← β2·V + (1−β2)·Ĝ²     (both in the rotated basis)
//                   D = Q_L (M / (√V + ε)) Q_Rᵀ ;  normalize_grads: D ← D / (1e-30 + RMS(D))
//                   W ← (W − lr·c·D)·(1 − lr·wd),  c = correct_bias ? √(1 − β2^k) / (1 − β1^k) : 1
//                   L ← βs·L + (1 − βs)(sG)(sG)ᵀ ; R likewise
//                   k % precondition_frequency = 0: a refresh, per rotated side (L with Q_L shown):
//                     M back to the standard basis (Q_L M Q_Rᵀ, with the old bases);
//                     P = L·Q_L; λ̃_j = (Q_Lᵀ L Q_L)_jj = Σ_i Q_L[i,j]·P[i,j]; order j by λ̃ descending;
//                     permute V's rows (R: columns) and P's columns by it; Q_L = the Q of QR(P);
//                     M into the new bases (Q_Lᵀ M Q_R).
// The reference (soap.py) carries M back and forth every step; between refreshes the bases do not
// change and the round trip is the identity, so it is made at a refresh only. Cautious weight
// decay applies the decay before the update, where D and W share a sign.
// With several ranks each matrix is one unit of owned work (OptimizerHooks::owners), costed by its
// eigenbasis work (m³ + n³ of its rotated sides); only the rank told it owns a matrix keeps its
// state and computes D into the memory it is given, worker/parallel hands every D to every rank
// (in chunks, applied as they arrive: the update is element-wise), and all apply them alike.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/optim/optim_internal.h"
#include "worker/optim/parts.h"

namespace precon::worker::optim {

using kernels::Tensor;
using kernels::Trans;

namespace {

class Soap final : public Optimizer {
 public:
  Soap(const OptimizerConfig& config, const std::vector<OptimParam>& params, kernels::Device device,
       const OptimizerHooks& hooks)
      : config_(config.soap),  // checked by make_optimizer against the key table
        lr_(config.lr),
        cautious_(cautious_decay(config)),
        shampoo_beta_(config_.shampoo_beta >= 0 ? config_.shampoo_beta : config_.beta2),
        device_(device),
        adamw_(matrix_params(params, false), adamw_hyper(config, false), device,
               hooks.distribute_elementwise ? hooks.ranges : nullptr) {
    for (const OptimParam& p : matrix_params(params, true)) {
      const ParamSpec& s = *p.spec;
      if (s.shape.size() != 2) throw OptimizerError("soap: " + s.name + " is routed as a matrix but is not 2-D");
      Matrix m;
      m.name = s.name;
      m.param = visible(p.param, held_spec(p));
      m.src = p;
      m.rows = s.shape[0];
      m.cols = s.shape[1];
      m.left = m.rows <= config_.max_preconditioner_dim;
      m.right = m.cols <= config_.max_preconditioner_dim;
      matrices_.push_back(std::move(m));
    }
    std::vector<OwnedUnit> units;
    for (const Matrix& m : matrices_)
      units.push_back({(m.left ? std::pow(double(m.rows), 3) : 0.0) + (m.right ? std::pow(double(m.cols), 3) : 0.0) +
                           double(m.rows) * double(m.cols),
                       {m.rows * m.cols}});
    results_ = plan_owners(hooks, units, kernels::DType::f32, kGatherChunk, device);
    int64_t max_numel = 1, max_side = 1;
    std::vector<Handles> handles(matrices_.size());
    for (size_t i = 0; i < matrices_.size(); ++i) {
      Matrix& m = matrices_[i];
      m.unit = i;
      max_numel = std::max(max_numel, m.rows * m.cols);
      max_side = std::max({max_side, m.rows, m.cols});
      if (!mine(m)) continue;
      Handles& h = handles[i];
      h.exp_avg = exp_avg_.add(m.name, -1, {m.rows, m.cols});
      h.exp_avg_sq = exp_avg_sq_.add(m.name, -1, {m.rows, m.cols});
      if (m.left) h.L = L_.add(m.name, -1, {m.rows, m.rows}), h.QL = QL_.add(m.name, -1, {m.rows, m.rows});
      if (m.right) h.R = R_.add(m.name, -1, {m.cols, m.cols}), h.QR = QR_.add(m.name, -1, {m.cols, m.cols});
    }
    for (StateBuffer* state : state_buffers()) state->allocate(device);
    for (size_t i = 0; i < matrices_.size(); ++i) {
      Matrix& m = matrices_[i];
      if (!mine(m)) continue;
      const Handles& h = handles[i];
      m.exp_avg = exp_avg_.get(h.exp_avg);
      m.exp_avg_sq = exp_avg_sq_.get(h.exp_avg_sq);
      if (m.left) m.L = L_.get(h.L), m.QL = QL_.get(h.QL);
      if (m.right) m.R = R_.get(h.R), m.QR = QR_.get(h.QR);
    }
    // Scratch: four views of the largest matrix or side², and one side of eigenvalues.
    const int64_t big = std::max(max_numel, max_side * max_side);
    work_ = kernels::Buffer(device, static_cast<size_t>(4 * big + max_side) * sizeof(float));
    float* base = static_cast<float*>(work_.data());
    scratch_ = {base, base + big, base + 2 * big, base + 3 * big, base + 4 * big};
    roots_ = merge_roots(params, {}, adamw_);
    adamw_primary_ = results_->primary();
  }

  void step(const StepContext& ctx) override {
    {
      PhaseTimer timer(phases_.adamw, device_);
      adamw_.step(ctx);
    }
    const int64_t k = ctx.step - 1;  // updates made before this step
    // First every gradient, then every matrix's work. A tensor-parallel matrix's whole gradient is
    // gathered with every rank of the group, matrix by matrix: gathering each just before its work
    // would make each rank wait out the others' matrices at its next gather. The owner keeps it in
    // the memory of its result until D is computed there (accumulate reads it before direction).
    for (Matrix& m : matrices_) {
      Tensor whole;
      {
        PhaseTimer timer(phases_.communication, device_);
        whole = results_->whole_gradient(m.src);
      }
      if (!mine(m)) continue;
      m.grad = whole;
      if (m.src.split()) {
        m.grad = view(results_->own(m.unit), m.rows, m.cols);
        kernels::copy(m.grad, whole);
      }
    }
    for (Matrix& m : matrices_) {
      if (!mine(m)) continue;
      if (k == 0) {
        initialise(m, ctx.grad_scale);
        continue;
      }
      {
        PhaseTimer timer(phases_.statistics, device_);
        accumulate(m, ctx.grad_scale);
      }
      direction(m, ctx.grad_scale, k);
      if (k % config_.precondition_frequency == 0) refresh(m);
    }
    if (k == 0) return;  // the first step only builds the bases: nothing to apply
    const double lr = lr_ * ctx.lr_scale;
    double c = 1.0;
    if (config_.correct_bias) {
      c = std::sqrt(1.0 - std::pow(config_.beta2, double(k))) / (1.0 - std::pow(config_.beta1, double(k)));
    }
    const double decay = 1.0 - lr * config_.weight_decay;
    // Each D arrives as ranges of its values (in chunks, so that the receive buffer holds a chunk
    // from every rank, not every update), applied as they arrive: the update is element-wise.
    results_->share(
        [&](size_t unit, size_t, int64_t first, int64_t n, const float* src) {
          const Matrix& m = matrices_[unit];
          if (m.src.split()) {  // this rank's part of the range
            const float alpha = static_cast<float>(cautious_ ? -lr * c : -lr * c * decay);
            apply_range_to_part(m.src, first, n, src, alpha, static_cast<float>(decay), cautious_);
            return;
          }
          Tensor w = make_view(m.param.f32() + first, {n}, device_);
          Tensor d = make_view(const_cast<float*>(src), {n}, device_);
          if (cautious_) {
            kernels::cautious_axpby(w, d, static_cast<float>(-lr * c), static_cast<float>(decay));
          } else {
            // (W − lr·c·D)·(1 − lr·wd) as the reference orders it: the decay after the update.
            kernels::axpby(w, d, static_cast<float>(-lr * c * decay), static_cast<float>(decay));
          }
        },
        phases_.communication, phases_.other);
  }

  std::vector<NamedState> state_tensors() override {
    return owner_state_tensors(std::as_const(*this).state_buffers(), adamw_, adamw_primary_);
  }
  std::vector<StateKind> state_kinds() const override { return owner_state_kinds(state_buffers(), adamw_); }
  nlohmann::json state_scalars() const override { return nlohmann::json::object(); }
  void load_state_scalars(const nlohmann::json&) override {}
  PhaseSeconds phase_seconds() const override { return phases_; }
  int64_t comm_bytes() const override { return results_->comm_bytes() + adamw_.comm_bytes(); }
  // The matrices' gradients are read by every rank (their blocks' owners are spread over rows and
  // columns); the AdamW group's by the rank whose range holds them when it is sharded.
  std::vector<int> gradient_roots() const override { return roots_; }

  std::string routing_summary() const override {
    int64_t n = 0, rotated = 0, held = 0;
    for (const Matrix& m : matrices_) {
      n += m.param.numel();
      rotated += m.left + m.right;
      held += mine(m);
    }
    return route_text("soap", matrices_.size(), n) + " (" + std::to_string(rotated) + " of " +
           std::to_string(2 * matrices_.size()) + " sides rotated); " +
           route_text("adamw", adamw_.tensors(), adamw_.numel()) +
           (results_->distributed() ? "; soap: " + results_->who() + " keeps the eigenbases of " +
                                     std::to_string(held) + " of " + std::to_string(matrices_.size()) + " matrices"
                               : "");
  }

 private:
  struct Matrix {
    std::string name;
    Tensor param;  // what this rank holds (its part of a tensor-parallel matrix)
    Tensor grad;   // the whole gradient, during a step (a split matrix's in its result's memory until D)
    OptimParam src;
    int64_t rows = 0, cols = 0;
    bool left = true, right = true;  // the sides that are rotated
    Tensor exp_avg, exp_avg_sq, L, R, QL, QR;  // on the owner only; the rotated sides' factors
    size_t unit = 0;  // in matrices_: its unit of owned work
  };
  struct Handles {
    size_t exp_avg = 0, exp_avg_sq = 0, L = 0, R = 0, QL = 0, QR = 0;
  };
  struct Scratch {
    float* a;       // the projected gradient; a permutation's result
    float* b;       // the half-projected product; a permutation's source
    float* side_a;  // side × side (P = L·Q)
    float* side_b;  // side × side (the eigenvectors, ascending)
    float* values;  // a side's eigenvalues
  };

  bool mine(const Matrix& m) const { return results_->mine(m.unit); }

  std::vector<StateBuffer*> state_buffers() { return {&exp_avg_, &exp_avg_sq_, &L_, &R_, &QL_, &QR_}; }
  std::vector<const StateBuffer*> state_buffers() const { return {&exp_avg_, &exp_avg_sq_, &L_, &R_, &QL_, &QR_}; }

  Tensor view(float* p, int64_t rows, int64_t cols) const { return make_view(p, {rows, cols}, device_); }

  // The factors' EMA: L ← βs·L + (1 − βs)·(sG)(sG)ᵀ, R ← βs·R + (1 − βs)·(sG)ᵀ(sG).
  void accumulate(Matrix& m, float s) {
    const float w = static_cast<float>((1.0 - shampoo_beta_) * double(s) * double(s));
    const float beta = static_cast<float>(shampoo_beta_);
    if (m.left) kernels::syrk(m.L, m.grad, Trans::no, w, beta);
    if (m.right) kernels::syrk(m.R, m.grad, Trans::yes, w, beta);
  }

  // Step 1: the factors from the first gradient and their eigenvectors, eigenvalues descending.
  void initialise(Matrix& m, float s) {
    {
      PhaseTimer timer(phases_.statistics, device_);
      accumulate(m, s);
    }
    PhaseTimer timer(phases_.eigenbasis, device_);
    if (m.left) eigenbasis(m.QL, m.L, m.name + " (L)");
    if (m.right) eigenbasis(m.QR, m.R, m.name + " (R)");
  }

  void eigenbasis(Tensor q, const Tensor& factor, const std::string& what) {
    const int64_t n = factor.shape[0];
    Tensor values = make_view(scratch_.values, {n}, device_);
    Tensor ascending = view(scratch_.side_b, n, n);
    if (!kernels::symmetric_eigh(values, ascending, factor, false) &&
        !kernels::symmetric_eigh(values, ascending, factor, true)) {
      throw OptimizerError("soap: the eigendecomposition of the first statistics of " + what +
                           " failed in fp32 and fp64: are the gradients finite?");
    }
    reverse_columns(q, ascending);
  }

  // dst[:, j] = src[:, order[j]] for a square n × n src (contiguous); order given on the host.
  void permute_columns(Tensor dst, const Tensor& src, const std::vector<int64_t>& order) {
    const int64_t n = src.shape[0];
    Tensor t_src = view(scratch_.b, n, n), t_dst = view(scratch_.a, n, n);
    kernels::transpose(t_src, src);  // columns as rows: each a contiguous copy
    for (int64_t j = 0; j < n; ++j) kernels::copy(t_dst.select(j), t_src.select(order[static_cast<size_t>(j)]));
    kernels::transpose(dst, t_dst);
  }

  void reverse_columns(Tensor dst, const Tensor& src) {
    std::vector<int64_t> order(static_cast<size_t>(src.shape[0]));
    std::iota(order.rbegin(), order.rend(), 0);
    permute_columns(dst, src, order);
  }

  // V's rows (dim 0) or columns (dim 1) reordered: row i of the result is row order[i] of V.
  void permute_exp_avg_sq(Matrix& m, int dim, const std::vector<int64_t>& order) {
    Tensor v = m.exp_avg_sq;
    Tensor copy = view(scratch_.b, dim == 0 ? m.rows : m.cols, dim == 0 ? m.cols : m.rows);
    if (dim == 0) kernels::copy(copy, v);
    else kernels::transpose(copy, v);
    Tensor out = view(scratch_.a, copy.shape[0], copy.shape[1]);
    for (int64_t i = 0; i < copy.shape[0]; ++i) kernels::copy(out.select(i), copy.select(order[static_cast<size_t>(i)]));
    if (dim == 0) kernels::copy(v, out);
    else kernels::transpose(v, out);
  }

  // Q_Lᵀ X Q_R (into = true) or Q_L X Q_Rᵀ (into = false) of a matrix-sized x, in place.
  void rotate(Matrix& m, Tensor x, bool into) {
    Tensor t = view(scratch_.b, m.rows, m.cols);
    if (m.left) {
      kernels::gemm(t, m.QL, x, into ? Trans::yes : Trans::no, Trans::no);
      kernels::copy(x, t);
    }
    if (m.right) {
      kernels::gemm(t, x, m.QR, Trans::no, into ? Trans::no : Trans::yes);
      kernels::copy(x, t);
    }
  }

  // The Adam step in the rotated basis; D into this matrix's place among this rank's results.
  void direction(Matrix& m, float s, int64_t k) {
    PhaseTimer timer(phases_.other, device_);
    Tensor g = view(scratch_.a, m.rows, m.cols);
    kernels::copy(g, m.grad);
    rotate(m, g, true);
    Tensor d = view(results_->own(m.unit), m.rows, m.cols);
    // With lr = −1, no decay and no bias correction, adamw_update leaves M/(√V + ε) in a zeroed d,
    // having updated M and V from s·Ĝ.
    kernels::AdamWParams hp;
    hp.lr = -1.0f;
    hp.beta1 = static_cast<float>(config_.beta1);
    hp.beta2 = static_cast<float>(config_.beta2);
    hp.eps = static_cast<float>(config_.eps);
    hp.weight_decay = 0.0f;
    hp.step = static_cast<int>(k);
    hp.bias_correction = false;
    hp.grad_scale = s;
    kernels::fill_zero(d);
    kernels::adamw_update(d, g, m.exp_avg, m.exp_avg_sq, hp);
    rotate(m, d, false);
    if (config_.normalize_grads) {
      const double rms = std::sqrt(kernels::sum_squares(d) / double(d.numel()));
      kernels::scale(d, static_cast<float>(1.0 / (1e-30 + rms)));
    }
  }

  // One power step and a QR per rotated side, V re-sorted by the estimated eigenvalues; M carried
  // into the new bases.
  void refresh(Matrix& m) {
    PhaseTimer timer(phases_.eigenbasis, device_);
    rotate(m, m.exp_avg, false);
    if (m.left) refresh_side(m, m.L, m.QL, 0);
    if (m.right) refresh_side(m, m.R, m.QR, 1);
    rotate(m, m.exp_avg, true);
  }

  void refresh_side(Matrix& m, const Tensor& factor, Tensor q, int dim) {
    const int64_t n = factor.shape[0];
    Tensor p = view(scratch_.side_a, n, n);
    kernels::gemm(p, factor, q);
    // λ̃_j = Σ_i Q[i,j]·P[i,j], on the host (n values; the order is a host decision).
    std::vector<float> hq(static_cast<size_t>(n * n)), hp(hq.size());
    kernels::copy(Tensor::view(hq.data(), {n, n}), q);
    kernels::copy(Tensor::view(hp.data(), {n, n}), p);
    std::vector<double> estimate(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) estimate[size_t(j)] += double(hq[size_t(i * n + j)]) * hp[size_t(i * n + j)];
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return estimate[size_t(a)] > estimate[size_t(b)]; });
    permute_exp_avg_sq(m, dim, order);
    Tensor sorted = view(scratch_.side_b, n, n);
    permute_columns(sorted, p, order);
    kernels::qr_orthonormal(q, sorted);
  }

  SoapConfig config_;
  double lr_;
  bool cautious_;  // optimizer.weight_decay_mode = "cautious"
  double shampoo_beta_;
  kernels::Device device_;
  AdamWGroup adamw_;
  std::vector<Matrix> matrices_;
  // One allocation per state kind, matrices in parameter-table order (see StateKind).
  StateBuffer exp_avg_{"exp_avg_rotated"}, exp_avg_sq_{"exp_avg_sq_rotated"}, L_{"L"}, R_{"R"};
  StateBuffer QL_{"eigenbasis_L"}, QR_{"eigenbasis_R"};
  kernels::Buffer work_;
  Scratch scratch_{};
  std::unique_ptr<OwnedResults> results_;  // the matrices' owners and their D's way to every rank
  bool adamw_primary_ = true;             // this rank writes the replicated AdamW state (data index 0)
  std::vector<int> roots_;
  PhaseSeconds phases_;
};

}  // namespace

std::unique_ptr<Optimizer> make_soap(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                     kernels::Device device, const OptimizerHooks& hooks) {
  return std::make_unique<Soap>(config, params, device, hooks);
}

}  // namespace precon::worker::optim
