// crossentropy_forward / crossentropy_backward against the double reference and finite
// differences; ignored targets, padded vocabulary, in-place gradients.
#include <gtest/gtest.h>

#include "kernels/error.h"
#include "kernels/nn.h"
#include "kernels/reference/nn_reference.h"
#include "tests/kernels/test_nn_util.h"

namespace precon::test {
namespace {

using kernels::ShapeError;
using kernels::UnsupportedError;
using namespace precon::test::nn;
namespace ref = kernels::reference;

struct CeShape {
  int B, T, V, Vp;  // B = 0: 2-D (T, Vp) logits
};

// Targets in [0, V) with about one in five ignored (-1 or another negative value).
std::vector<int32_t> make_targets(int n, int V, uint64_t seed) {
  auto targets = random_ints(n, seed, 0, V - 1);
  auto coin = random_ints(n, seed + 100, 0, 9);
  for (int i = 0; i < n; ++i)
    if (coin[i] < 2) targets[i] = coin[i] == 0 ? -1 : -100;
  return targets;
}

TEST(NnCrossentropy, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (CeShape s : {CeShape{0, 1, 1, 1}, CeShape{0, 7, 13, 16}, CeShape{2, 5, 50, 64}, CeShape{0, 9, 100, 100},
                    CeShape{2, 8, 1000, 1024}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " V=" << s.V << " Vp=" << s.Vp);
    const int N = std::max(s.B, 1) * s.T, V = s.V, Vp = s.Vp;
    auto rows = [&](std::vector<float>& v) { return s.B ? host_view(v, {s.B, s.T, Vp}) : host_view(v, {s.T, Vp}); };
    auto logits = random_normal(size_t(N) * Vp, seed + 1, 3.0f);
    for (int v = 0; v < Vp; ++v) logits[v] += 1000.0f;  // exp would overflow without the max shift
    auto targets = make_targets(N, V, seed + 2);
    const float dloss = 1.0f / N;
    std::vector<float> losses(N, NAN), dlogits(logits.size(), NAN);  // both must be overwritten

    kernels::crossentropy_forward(host_view(losses, {N}), rows(logits), host_view_i32(targets, {N}), V);
    std::vector<double> losses_r(N), dlogits_r(logits.size());
    auto logits_d = to_double(logits);
    ref::crossentropy_forward(losses_r.data(), logits_d.data(), targets.data(), N, V, Vp);
    // log-sum-exp of up to 1000 terms in fp32, the 1000 offset cancelling exactly in x - max:
    // absolute error ~1e-6 on losses of O(1-10).
    EXPECT_LE(max_rel(losses, losses_r, 1.0), 1e-5);

    std::fill(losses.begin(), losses.end(), NAN);
    kernels::crossentropy_backward(rows(dlogits), host_view(losses, {N}), rows(logits), host_view_i32(targets, {N}),
                                   V, dloss);
    ref::crossentropy_backward(dlogits_r.data(), losses_r.data(), logits_d.data(), targets.data(), N, V, Vp, dloss);
    EXPECT_LE(max_rel(losses, losses_r, 1.0), 1e-5);
    // Probabilities in [0, 1] times dloss: exp of an argument with ~1e-6 absolute error.
    EXPECT_LE(max_rel(dlogits, dlogits_r, dloss), 1e-5);
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vp; ++v)
        if (targets[n] < 0 || v >= V) {
          ASSERT_EQ(dlogits[size_t(n) * Vp + v], 0.0f) << "row " << n << " col " << v;
        }
    for (int n = 0; n < N; ++n)
      if (targets[n] < 0) {
        EXPECT_EQ(losses[n], 0.0f);
      }
  }
}

TEST(NnCrossentropy, BackwardInPlaceMatchesSeparateOutput) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 6, V = 20, Vp = 24;
  auto logits = random_normal(N * Vp, seed + 1, 2.0f);
  auto targets = make_targets(N, V, seed + 2);
  std::vector<float> losses(N), dlogits(logits.size()), in_place = logits;
  kernels::crossentropy_backward(host_view(dlogits, {N, Vp}), host_view(losses, {N}), host_view(logits, {N, Vp}),
                                 host_view_i32(targets, {N}), V, 0.5f);
  kernels::crossentropy_backward(host_view(in_place, {N, Vp}), host_view(losses, {N}),
                                 host_view(in_place, {N, Vp}), host_view_i32(targets, {N}), V, 0.5f);
  EXPECT_EQ(in_place, dlogits);
}

TEST(NnCrossentropy, ReferenceGradientMatchesFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 4, V = 6, Vp = 8;
  auto logits = to_double(random_normal(N * Vp, seed + 1, 2.0f));
  std::vector<int32_t> targets = {3, -1, 0, 5};
  const double dloss = 0.7;
  std::vector<double> losses(N), dlogits(logits.size());
  auto loss = [&] {
    ref::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    double sum = 0;
    for (double l : losses) sum += dloss * l;
    return sum;
  };
  ref::crossentropy_backward(dlogits.data(), losses.data(), logits.data(), targets.data(), N, V, Vp, dloss);
  // Smooth; padded columns and the ignored row have an exactly zero numerical derivative.
  EXPECT_LE(max_rel(dlogits, numerical_gradient(logits, loss), 1e-2), 1e-6);
}

TEST(NnCrossentropy, AllIgnoredGivesZero) {
  const int N = 3, V = 5, Vp = 8;
  auto logits = random_normal(N * Vp, 7);
  std::vector<int32_t> targets(N, -1);
  std::vector<float> losses(N, 1.0f), dlogits(N * Vp, 1.0f);
  kernels::crossentropy_backward(host_view(dlogits, {N, Vp}), host_view(losses, {N}), host_view(logits, {N, Vp}),
                                 host_view_i32(targets, {N}), V, 1.0f);
  EXPECT_EQ(losses, std::vector<float>(N, 0.0f));
  EXPECT_EQ(dlogits, std::vector<float>(N * Vp, 0.0f));
}

TEST(NnCrossentropy, RejectsBadInput) {
  const int N = 4, V = 5, Vp = 8;
  std::vector<float> logits(N * Vp), dlogits(N * Vp), losses(N), big(N * Vp + 8);
  std::vector<int32_t> targets = {0, 1, -1, 4};
  auto x = host_view(logits, {N, Vp}), dx = host_view(dlogits, {N, Vp}), l = host_view(losses, {N});
  auto t = host_view_i32(targets, {N});
  EXPECT_NO_THROW(kernels::crossentropy_forward(l, x, t, V));
  EXPECT_NO_THROW(kernels::crossentropy_forward(l, x, t, Vp));
  EXPECT_THROW(kernels::crossentropy_forward(l, x, t, Vp + 1), ShapeError);
  EXPECT_THROW(kernels::crossentropy_forward(l, x, t, 0), ShapeError);
  EXPECT_THROW(kernels::crossentropy_forward(l, x, host_view_i32(targets, {N - 1}), V), ShapeError);
  EXPECT_THROW(kernels::crossentropy_forward(host_view(big, {N + 1}), x, t, V), ShapeError);
  EXPECT_THROW(kernels::crossentropy_forward(l, host_view(logits, {N * Vp}), t, V), ShapeError);
  EXPECT_THROW(kernels::crossentropy_forward(l, x, host_view(losses, {N}), V), UnsupportedError);  // f32 targets
  EXPECT_THROW(kernels::crossentropy_forward(l, as_bf16(x), t, V), UnsupportedError);
  EXPECT_THROW(kernels::crossentropy_forward(on_cuda(l), x, t, V), ShapeError);
  EXPECT_THROW(kernels::crossentropy_backward(host_view(big, {N, Vp + 2}), l, x, t, V, 1.0f), ShapeError);
  EXPECT_THROW(kernels::crossentropy_backward(dx, l, x, t, Vp + 1, 1.0f), ShapeError);
  EXPECT_THROW(kernels::crossentropy_backward(dx, l, x, on_cuda(t), V, 1.0f), ShapeError);
  targets[3] = V;  // a target in the padding
  EXPECT_THROW(kernels::crossentropy_forward(l, x, t, V), ShapeError);
  EXPECT_THROW(kernels::crossentropy_backward(dx, l, x, t, V, 1.0f), ShapeError);
}

}  // namespace
}  // namespace precon::test
