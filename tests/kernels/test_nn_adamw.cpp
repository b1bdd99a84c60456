// adamw_update against torch.optim.AdamW's update written out by hand, and global_norm.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/error.h"
#include "kernels/nn.h"
#include "kernels/reference/nn_reference.h"
#include "tests/kernels/test_nn_util.h"

namespace precon::test {
namespace {

using kernels::AdamWParams;
using kernels::ShapeError;
using kernels::UnsupportedError;
using namespace precon::test::nn;
namespace ref = kernels::reference;

// One step of torch.optim.AdamW (single-tensor path, amsgrad off, maximize off) in double,
// transcribed from its source rather than from nn.h: the lerp form of the first moment and
// the step_size / bias_correction2_sqrt form of the update. The gradient is pre-scaled as
// clip_grad_norm_ does in place.
void torch_adamw_step(std::vector<double>& p, std::vector<double> g, std::vector<double>& m, std::vector<double>& v,
                      const AdamWParams& hp) {
  for (double& x : g) x *= hp.grad_scale;
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2;
  const double bias_correction1 = hp.bias_correction ? 1 - std::pow(b1, hp.step) : 1;
  const double bias_correction2 = hp.bias_correction ? 1 - std::pow(b2, hp.step) : 1;
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1 - lr * hp.weight_decay;             // param.mul_(1 - lr * weight_decay)
    m[i] += (g[i] - m[i]) * (1 - b1);             // exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * b2 + (1 - b2) * g[i] * g[i];    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    double denom = std::sqrt(v[i]) / bias_correction2_sqrt + hp.eps;
    p[i] += -step_size * m[i] / denom;            // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

TEST(NnAdamw, MatchesTorchFormulaOverSeveralSteps) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  AdamWParams plain;
  AdamWParams decayed;
  decayed.weight_decay = 0.1f;
  decayed.lr = 3e-3f;
  AdamWParams uncorrected = decayed;
  uncorrected.bias_correction = false;
  AdamWParams scaled = decayed;
  scaled.grad_scale = 0.25f;
  scaled.beta1 = 0.8f;
  scaled.beta2 = 0.95f;
  scaled.eps = 1e-6f;
  int variant = 0;
  for (AdamWParams hp : {plain, decayed, uncorrected, scaled}) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant++);
    const int n = 37;
    auto params = random_normal(n, seed + 1);
    std::vector<float> m(n), v(n);
    auto p_torch = to_double(params), m_torch = to_double(m), v_torch = to_double(v);
    auto p_ref = p_torch, m_ref = m_torch, v_ref = v_torch;
    for (int step = 1; step <= 5; ++step) {
      hp.step = step;
      auto grads = random_normal(n, seed + 10 + step);
      grads[0] = 1e-4f * grads[0];  // a tiny gradient: the update is still ~lr, eps matters a little
      kernels::adamw_update(host_view(params, {n}), host_view(grads, {n}), host_view(m, {n}), host_view(v, {n}), hp);
      torch_adamw_step(p_torch, to_double(grads), m_torch, v_torch, hp);
      ref::adamw_update(p_ref.data(), to_double(grads).data(), m_ref.data(), v_ref.data(), n, hp);
    }
    // The double reference and the transcription differ only in rounding order.
    EXPECT_LE(max_rel(p_ref, p_torch, 1.0), 1e-12);
    EXPECT_LE(max_rel(m_ref, m_torch, 1e-3), 1e-12);
    EXPECT_LE(max_rel(v_ref, v_torch, 1e-6), 1e-12);
    // fp32 state over five steps: a few ulp of O(1) parameters plus fp32 error in updates of
    // size lr. m is a signed sum that can cancel to ~0, so its error (~1e-8 absolute) is taken
    // relative to its typical size, 0.05 or more; v is a sum of squares and compared relatively,
    // with a floor below the tiny-gradient entry.
    EXPECT_LE(max_rel(params, p_torch, 1.0), 1e-6);
    EXPECT_LE(max_rel(m, m_torch, 0.05), 1e-5);
    EXPECT_LE(max_rel(v, v_torch, 1e-6), 1e-5);
  }
}

TEST(NnAdamw, CautiousDecaysOnlyWhereTheUpdateHasTheParametersSign) {
  // First step: the update is lr·sign(g); p = ±1 with g of either sign covers all four cases.
  std::vector<float> p = {1.0f, 1.0f, -1.0f, -1.0f}, g = {0.5f, -2.0f, 0.5f, -2.0f}, m(4), v(4);
  AdamWParams hp;
  hp.lr = 0.1f;
  hp.weight_decay = 0.1f;
  hp.cautious = true;
  kernels::adamw_update(host_view(p, {4}), host_view(g, {4}), host_view(m, {4}), host_view(v, {4}), hp);
  EXPECT_NEAR(p[0], 0.99f - 0.1f, 1e-6);   // update +lr, p > 0: decayed
  EXPECT_NEAR(p[1], 1.0f + 0.1f, 1e-6);    // update −lr, p > 0: not decayed
  EXPECT_NEAR(p[2], -1.0f - 0.1f, 1e-6);   // update +lr, p < 0: not decayed
  EXPECT_NEAR(p[3], -0.99f + 0.1f, 1e-6);  // update −lr, p < 0: decayed
}

TEST(NnAdamw, FirstStepMovesByLearningRate) {
  // With bias correction the first step is lr * g / (|g| + eps) = lr * sign(g), after the decay.
  std::vector<float> p = {1.0f, 1.0f}, g = {0.5f, -2.0f}, m(2), v(2);
  AdamWParams hp;
  hp.lr = 0.1f;
  hp.weight_decay = 0.1f;
  kernels::adamw_update(host_view(p, {2}), host_view(g, {2}), host_view(m, {2}), host_view(v, {2}), hp);
  EXPECT_NEAR(p[0], 0.99f - 0.1f, 1e-6);  // 1 - lr*wd*1 - lr
  EXPECT_NEAR(p[1], 0.99f + 0.1f, 1e-6);
  EXPECT_NEAR(m[0], 0.05f, 1e-7);        // (1 - 0.9) * 0.5
  EXPECT_NEAR(v[1], 0.004f, 1e-7);       // (1 - 0.999) * 4; 0.999f is off by 1e-8
}

TEST(NnAdamw, RejectsBadInput) {
  std::vector<float> p(8), g(8), m(8), v(8), short_v(7);
  auto P = host_view(p, {8}), G = host_view(g, {8}), M = host_view(m, {8}), V = host_view(v, {8});
  AdamWParams hp;
  EXPECT_NO_THROW(kernels::adamw_update(P, G, M, V, hp));
  EXPECT_NO_THROW(kernels::adamw_update(host_view(p, {2, 4}), G, M, V, hp));  // equal numel is enough
  EXPECT_THROW(kernels::adamw_update(P, G, M, host_view(short_v, {7}), hp), ShapeError);
  EXPECT_THROW(kernels::adamw_update(as_bf16(P), G, M, V, hp), UnsupportedError);
  EXPECT_THROW(kernels::adamw_update(P, as_bf16(G), M, V, hp), UnsupportedError);
  EXPECT_THROW(kernels::adamw_update(P, G, on_cuda(M), V, hp), ShapeError);
  EXPECT_THROW(kernels::adamw_update(P, host_view(g, {2, 4}).transposed(), M, V, hp), ShapeError);
  AdamWParams bad = hp;
  bad.beta1 = 1.0f;
  EXPECT_THROW(kernels::adamw_update(P, G, M, V, bad), UnsupportedError);
  bad = hp;
  bad.step = 0;
  EXPECT_THROW(kernels::adamw_update(P, G, M, V, bad), UnsupportedError);
  bad.bias_correction = false;
  EXPECT_NO_THROW(kernels::adamw_update(P, G, M, V, bad));
}

TEST(NnGlobalNorm, MatchesDoubleSum) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  auto a = random_normal(1000, seed + 1), b = random_normal(7, seed + 2, 10.0f), c = random_normal(1, seed + 3);
  double want = 0;
  for (const auto* t : {&a, &b, &c})
    for (float x : *t) want += double(x) * x;
  want = std::sqrt(want);
  const double got = kernels::global_norm({host_view(a, {10, 100}), host_view(b, {7}), kernels::Tensor{},
                                           host_view(c, {1})});
  EXPECT_NEAR(got, want, 1e-12 * want);  // accumulated in double on both sides
  EXPECT_EQ(kernels::global_norm({}), 0.0);
}

}  // namespace
}  // namespace precon::test
