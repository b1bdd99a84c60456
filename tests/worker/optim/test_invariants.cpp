// Invariants of the optimizers: Shampoo (β1 = β2 = 0, no grafting) and Muon (convergent
// schedule) both give the polar factor U Vᵀ of the gradient; Muon's momentum convention does not
// change its direction; every parameter gets the update of the optimizer it is routed to.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/nn.h"
#include "tests/worker/support/optim_util.h"

namespace precon::worker {
namespace {

using testing::host_visible;

// Symmetric eigendecomposition by cyclic Jacobi rotations, in double: a = q diag(w) qᵀ.
void jacobi_eigh(std::vector<double> a, int n, std::vector<double>& w, std::vector<double>& q) {
  q.assign(size_t(n) * n, 0.0);
  for (int i = 0; i < n; ++i) q[size_t(i) * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) off += a[size_t(i) * n + j] * a[size_t(i) * n + j];
    if (off < 1e-30) break;
    for (int p = 0; p < n; ++p) {
      for (int r = p + 1; r < n; ++r) {
        const double apr = a[size_t(p) * n + r];
        if (std::abs(apr) < 1e-300) continue;
        const double theta = (a[size_t(r) * n + r] - a[size_t(p) * n + p]) / (2 * apr);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // A ← A J (columns p, r)
          const double akp = a[size_t(k) * n + p], akr = a[size_t(k) * n + r];
          a[size_t(k) * n + p] = c * akp - s * akr;
          a[size_t(k) * n + r] = s * akp + c * akr;
        }
        for (int k = 0; k < n; ++k) {  // A ← Jᵀ A (rows p, r)
          const double apk = a[size_t(p) * n + k], ark = a[size_t(r) * n + k];
          a[size_t(p) * n + k] = c * apk - s * ark;
          a[size_t(r) * n + k] = s * apk + c * ark;
        }
        for (int k = 0; k < n; ++k) {
          const double qkp = q[size_t(k) * n + p], qkr = q[size_t(k) * n + r];
          q[size_t(k) * n + p] = c * qkp - s * qkr;
          q[size_t(k) * n + r] = s * qkp + c * qkr;
        }
      }
    }
  }
  w.resize(n);
  for (int i = 0; i < n; ++i) w[i] = a[size_t(i) * n + i];
}

// The polar factor U Vᵀ of g (rows × cols) in double: (g gᵀ)^(-1/2) g for wide g, g (gᵀ g)^(-1/2)
// for tall g (the smaller Gram matrix is full rank for a generic g).
std::vector<double> polar_factor(const std::vector<float>& g, int rows, int cols) {
  const bool wide = rows <= cols;
  const int n = wide ? rows : cols;
  auto at = [&](int i, int j) { return double(g[size_t(i) * cols + j]); };
  std::vector<double> gram(size_t(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < (wide ? cols : rows); ++k) s += wide ? at(i, k) * at(j, k) : at(k, i) * at(k, j);
      gram[size_t(i) * n + j] = s;
    }
  std::vector<double> w, q, root(size_t(n) * n, 0.0);
  jacobi_eigh(gram, n, w, q);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) root[size_t(i) * n + j] += q[size_t(i) * n + k] * q[size_t(j) * n + k] / std::sqrt(w[k]);
  std::vector<double> out(size_t(rows) * cols, 0.0);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      for (int k = 0; k < n; ++k) out[size_t(i) * cols + j] += wide ? root[size_t(i) * n + k] * at(k, j) : at(i, k) * root[size_t(k) * n + j];
  return out;
}

double rel_diff(const std::vector<float>& a, const std::vector<double>& b, double a_scale) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] * a_scale - b[i]) * (a[i] * a_scale - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// One step from W = 0 with lr = 1: every matrix ends at −scale·P; returns max ‖P − UVᵀ‖/‖UVᵀ‖.
double polar_error(const OptimizerConfig& config, bool spectral_scale) {
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  testing::fill_random(store, 11, 1.0f, true);
  auto opt = make_optimizer(config, testing::optim_params(store), kernels::Device::cpu);
  opt->step(StepContext{});
  double worst = 0;
  int checked = 0;
  for (size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& s = store.spec(i);
    if (s.kind != ParamKind::matrix) continue;
    const double scale = spectral_scale ? std::sqrt(double(s.fan_out) / double(s.fan_in)) : 1.0;
    std::vector<double> polar = polar_factor(host_visible(store, i, true), int(s.shape[0]), int(s.shape[1]));
    const double err = rel_diff(host_visible(store, i), polar, -1.0 / scale);
    EXPECT_TRUE(std::isfinite(err)) << s.name;
    worst = std::max(worst, err);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  return worst;
}

TEST(OptimInvariants, ShampooWithoutFilteringOrGraftingIsThePolarFactor) {
  OptimizerConfig c;
  c.name = "shampoo";
  c.lr = 1.0;
  c.shampoo.beta1 = 0.0;
  c.shampoo.beta2 = 0.0;  // L = G Gᵀ, R = Gᵀ G
  c.shampoo.precondition_frequency = 1;
  c.shampoo.start_preconditioning_step = 1;
  c.shampoo.grafting = "none";
  c.shampoo.epsilon = 1e-10;
  c.shampoo.bias_correction = false;
  const double err = polar_error(c, false);
  std::printf("shampoo: max ‖P − UVᵀ‖/‖UVᵀ‖ = %.3g\n", err);
  // (G Gᵀ)^(-1/4) G (Gᵀ G)^(-1/4) = U Vᵀ exactly; fp32 eigh leaves ~1e-5, and the rank-deficient
  // factor's null space (ε^(-1/4) = 316) amplifies round-off a little more.
  EXPECT_LT(err, 1e-3);
}

TEST(OptimInvariants, MuonWithConvergentScheduleApproachesThePolarFactor) {
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 1.0;
  c.muon.momentum = 0.0;
  c.muon.coefficients = "explicit";
  c.muon.coefficient_list = {{2.0, -1.5, 0.5}};
  c.muon.ns_steps = 30;
  c.muon.ns_eps = 0.0;
  c.muon.split_qkv = false;
  c.muon.scale = "spectral";
  const double err = polar_error(c, true);
  std::printf("muon (2, -1.5, 0.5) x 30: max ‖O − UVᵀ‖/‖UVᵀ‖ = %.3g\n", err);
  EXPECT_LT(err, 1e-4);  // converged to fp32 round-off
  // Five keller steps stop short of 1 by design (singular values in ~[0.68, 1.13]).
  c.muon.coefficients = "keller";
  c.muon.ns_steps = 5;
  EXPECT_GT(polar_error(c, true), 1e-2);
}

// ema: M_e = (1−μ)·M_s at every step, so U_e = (1−μ)·U_s and NS (scale-invariant) gives the same O.
TEST(OptimInvariants, MuonMomentumFormDoesNotChangeTheDirection) {
  for (bool nesterov : {true, false}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain");
    std::vector<std::unique_ptr<ParamStore>> stores;
    std::vector<std::unique_ptr<Optimizer>> opts;
    for (const char* form : {"ema", "sgd"}) {
      OptimizerConfig c;
      c.name = "muon";
      c.lr = 0.05;
      c.muon.momentum = 0.9;
      c.muon.nesterov = nesterov;
      c.muon.momentum_form = form;
      stores.push_back(std::make_unique<ParamStore>(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu));
      opts.push_back(make_optimizer(c, testing::optim_params(*stores.back()), kernels::Device::cpu));
    }
    for (int t = 1; t <= 6; ++t) {
      std::vector<std::vector<std::vector<float>>> before(2), delta(2);
      for (int k = 0; k < 2; ++k) {
        testing::fill_random(*stores[k], 100 + t, 1.0f, true);
        for (size_t i = 0; i < stores[k]->size(); ++i) before[k].push_back(host_visible(*stores[k], i));
        opts[k]->step(StepContext{t, 1.0, 1.0f});
      }
      for (size_t i = 0; i < stores[0]->size(); ++i) {
        if (stores[0]->spec(i).kind != ParamKind::matrix) continue;
        std::vector<std::vector<float>> d(2);
        for (int k = 0; k < 2; ++k) {
          std::vector<float> after = host_visible(*stores[k], i);
          double norm = 0;
          for (size_t e = 0; e < after.size(); ++e) norm += double(after[e] - before[k][i][e]) * (after[e] - before[k][i][e]);
          for (size_t e = 0; e < after.size(); ++e) d[k].push_back(float((after[e] - before[k][i][e]) / std::sqrt(norm)));
        }
        EXPECT_LT(test::max_abs_diff(d[0], d[1]), 1e-4) << stores[0]->spec(i).name << " step " << t;
      }
    }
  }
}

}  // namespace
}  // namespace precon::worker
