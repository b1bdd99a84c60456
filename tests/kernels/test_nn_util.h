// Helpers shared by the NN op tests (test_nn_*.cpp): conversions between the fp32 tensors of the
// fast kernels and the double arrays of the reference, comparisons, finite differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

namespace precon::test::nn {

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline std::vector<float> to_float(const std::vector<double>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

// max_i |got_i - want_i| / max(|want_i|, floor); NaN anywhere gives NaN.
template <typename G>
double max_rel(const std::vector<G>& got, const std::vector<double>& want, double floor) {
  if (got.size() != want.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double d = std::fabs(double(got[i]) - want[i]) / std::max(std::fabs(want[i]), floor);
    if (!(d <= m)) m = d;
  }
  return m;
}

inline std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of loss() with respect to every element of x, which is perturbed in place
// and restored. In double with h = 1e-5 the truncation error is ~h² f''' ≈ 1e-10 and the
// rounding error ~1e-16 |loss| / h ≈ 1e-10 for the O(10) losses used here.
inline std::vector<double> numerical_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                              double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// Router logits (N,E) whose experts lie at least 0.1 apart in every row (a shuffled ladder of step
// 0.2 plus jitter of at most ±0.05), so that the top-k choice is the same under fp32 rounding, on
// another backend and under finite-difference steps.
inline std::vector<float> separated_logits(int64_t N, int64_t E, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> jitter(-0.05f, 0.05f);
  std::vector<int64_t> ladder(static_cast<size_t>(E));
  std::vector<float> x(static_cast<size_t>(N * E));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t e = 0; e < E; ++e) ladder[e] = e;
    std::shuffle(ladder.begin(), ladder.end(), rng);
    for (int64_t e = 0; e < E; ++e) x[n * E + e] = 0.2f * (float(ladder[e]) - 0.5f * float(E)) + jitter(rng);
  }
  return x;
}

// The first n entries of a random permutation of [0, m): distinct indices (m >= n).
inline std::vector<int32_t> random_injection(int64_t n, int64_t m, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) v[i] = static_cast<int32_t>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  v.resize(static_cast<size_t>(n));
  return v;
}

// Tensor views that break one rule each, for the bad-input tests; never dereferenced.
inline kernels::Tensor on_cuda(kernels::Tensor t) {
  t.device = kernels::Device::cuda;
  return t;
}
inline kernels::Tensor as_bf16(kernels::Tensor t) {
  t.dtype = kernels::DType::bf16;
  return t;
}

inline std::string seed_note(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with PRECON_TEST_SEED=" + std::to_string(seed) + ")";
}

}  // namespace precon::test::nn
