// Inverse p-th roots: X^p (A + εI) ≈ I on SPD matrices over a range of condition numbers,
// rank-deficient input, failures that keep the previous root.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/error.h"
#include "kernels/inverse_root.h"
#include "kernels/reference/linalg_reference.h"
#include "tests/common/test_util.h"

namespace precon::kernels {
namespace {

namespace ref = reference;

// Q diag(λ) Qᵀ with λ log-spaced from 1 down to 1/cond (Q from a QR-like Gram–Schmidt).
ref::Matrix random_spd(int64_t n, double cond, uint64_t seed) {
  ref::Matrix q = ref::from_float(test::random_normal(n * n, seed), n, n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += q(i, j) * q(i, k);
      for (int64_t i = 0; i < n; ++i) q(i, j) -= dot * q(i, k);
    }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += q(i, j) * q(i, j);
    for (int64_t i = 0; i < n; ++i) q(i, j) /= std::sqrt(norm);
  }
  ref::Matrix a(n, n);
  for (int64_t k = 0; k < n; ++k) {
    double lambda = n == 1 ? 1.0 : std::pow(cond, -double(k) / (n - 1));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) a(i, j) += q(i, k) * lambda * q(j, k);
  }
  return a;
}

// ‖X^p (A + εI) − I‖_max computed in double from the fp32 result.
double root_residual(const std::vector<float>& x, const ref::Matrix& a, double eps, int p) {
  const int64_t n = a.rows;
  ref::Matrix xm = ref::from_float(x, n, n), prod = ref::identity(n);
  for (int i = 0; i < p; ++i) prod = ref::matmul(prod, xm);
  ref::Matrix reg = a;
  for (int64_t i = 0; i < n; ++i) reg(i, i) += eps;
  ref::Matrix r = ref::matmul(prod, reg);
  double err = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) err = std::max(err, std::fabs(r(i, j) - (i == j)));
  return err;
}

std::vector<float> root(const ref::Matrix& a, InverseRootOptions opt, InverseRootInfo* info = nullptr) {
  std::vector<float> af = ref::to_float(a), out(af.size());
  InverseRootInfo i = matrix_inverse_root(test::host_view(out, {a.rows, a.rows}), test::host_view(af, {a.rows, a.rows}), opt);
  if (info) *info = i;
  return out;
}

// ‖X − X_ref‖_F / ‖X_ref‖_F against the double-precision root of the same (fp32-rounded) input.
double error_vs_reference(const std::vector<float>& x, const ref::Matrix& a, double eps, double p) {
  const ref::Matrix a32 = ref::from_float(ref::to_float(a), a.rows, a.cols);
  const ref::Matrix want = ref::inverse_root(a32, eps, p);
  double num = 0, den = 0;
  for (size_t i = 0; i < want.v.size(); ++i) {
    num += (x[i] - want.v[i]) * (x[i] - want.v[i]);
    den += want.v[i] * want.v[i];
  }
  return std::sqrt(num / den);
}

TEST(InverseRoot, JacobiReferenceIsAnInverseRoot) {
  // The yardstick itself: X^p (A + εI) = I to double precision.
  auto a = random_spd(32, 1e3, 7);
  const ref::Matrix x = ref::inverse_root(a, 1e-3, 4);
  EXPECT_LT(root_residual(ref::to_float(x), a, 1e-3, 4), 1e-5);
}

TEST(InverseRoot, EighMatchesTheDoublePrecisionRootUpToCond1e6) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t n : {1, 7, 64, 128}) {
    for (double cond : {1e1, 1e3, 1e6}) {
      for (int p : {2, 4}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " cond=" << cond << " p=" << p);
        auto a = random_spd(n, cond, seed + n);
        InverseRootOptions opt;
        opt.root = p;
        opt.epsilon = 1e-12f;
        // An fp32 eigensolver moves the small eigenvalues by about √n·u·‖A‖ (u = 6e-8), which
        // changes λ^(-1/p) by a relative (1/p)·√n·u·cond; twice that, capped at 0.25 (measured
        // 0.02–0.05 at cond 1e6), so X = 0 (off by 1) or X_ref/2 (off by 0.5) fail everywhere.
        const double tol = std::min(0.25, std::max(1e-5, 2.0 * std::sqrt(double(n)) * 6e-8 * cond / p));
        const double err = error_vs_reference(root(a, opt), a, opt.epsilon, p);
        std::printf("eigh n=%lld cond=%g p=%d rel err %.3g (bound %.3g)\n", static_cast<long long>(n), cond, p, err, tol);
        EXPECT_LT(err, tol);
      }
    }
  }
}

TEST(InverseRoot, NewtonSatisfiesDefinition) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t n : {1, 7, 64}) {
    for (double cond : {1e1, 1e3, 1e4}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " cond=" << cond);
      auto a = random_spd(n, cond, seed + n);
      InverseRootOptions opt;
      opt.method = RootMethod::newton;
      opt.epsilon = 1e-12f;
      InverseRootInfo info;
      auto x = root(a, opt, &info);
      EXPECT_GT(info.iterations, 0);
      // fp32 GEMM iteration: the fixed point is accurate to about cond·1e-6.
      EXPECT_LT(root_residual(x, a, opt.epsilon, 4), std::max(1e-3, cond * 2e-6));
    }
  }
}

TEST(InverseRoot, EighAndNewtonAgree) {
  const uint64_t seed = test::test_seed();
  auto a = random_spd(48, 100.0, seed);
  InverseRootOptions opt;
  opt.epsilon = 1e-6f;
  auto x_eigh = root(a, opt);
  opt.method = RootMethod::newton;
  auto x_newton = root(a, opt);
  EXPECT_LT(test::rel_frobenius(x_newton, x_eigh), 1e-4) << "seed " << seed;
}

TEST(InverseRoot, RankDeficientHandledThroughEpsilon) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 32, r = 5;
  auto b = ref::from_float(test::random_normal(n * r, seed), n, r);
  auto a = ref::matmul(b, ref::transpose(b));  // rank 5
  for (RootMethod method : {RootMethod::eigh, RootMethod::newton}) {
    InverseRootOptions opt;
    opt.epsilon = 1.0f;  // ~1/60 of the largest eigenvalue: the effective condition number stays ~60
    opt.method = method;
    SCOPED_TRACE(method == RootMethod::eigh ? "eigh" : "newton");
    auto x = root(a, opt);
    for (float v : x) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(root_residual(x, a, opt.epsilon, 4), 1e-3);
  }
  // The all-zero matrix gives ε^(-1/p) I.
  ref::Matrix zero(4, 4);
  InverseRootOptions opt;
  opt.epsilon = 1e-4f;
  auto x = root(zero, opt);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(x[i * 5], 10.0, 1e-4);
}

TEST(InverseRoot, NaNInputIsAnErrorAndKeepsPreviousOutput) {
  std::vector<float> a = {2, 0, 0, 2}, out = {7, 7, 7, 7};
  a[1] = NAN;
  for (RootMethod method : {RootMethod::eigh, RootMethod::newton}) {
    InverseRootOptions opt;
    opt.method = method;
    EXPECT_THROW(matrix_inverse_root(test::host_view(out, {2, 2}), test::host_view(a, {2, 2}), opt), NonFiniteError);
    EXPECT_EQ(out, std::vector<float>(4, 7.0f));
  }
  a[1] = INFINITY;
  EXPECT_THROW(matrix_inverse_root(test::host_view(out, {2, 2}), test::host_view(a, {2, 2}), {}), NonFiniteError);
}

TEST(InverseRoot, SingularWithoutEpsilonIsAnError) {
  std::vector<float> a = {1, 0, 0, 0}, out = {7, 7, 7, 7};
  InverseRootOptions opt;
  opt.epsilon = 0.0f;
  EXPECT_THROW(matrix_inverse_root(test::host_view(out, {2, 2}), test::host_view(a, {2, 2}), opt), NumericalError);
  EXPECT_EQ(out, std::vector<float>(4, 7.0f));
}

TEST(InverseRoot, RejectsBadShapesAndOptions) {
  std::vector<float> a(6), out(6);
  EXPECT_THROW(matrix_inverse_root(test::host_view(out, {2, 3}), test::host_view(a, {2, 3}), {}), ShapeError);
  std::vector<float> sq = {1, 0, 0, 1}, o2(4);
  InverseRootOptions opt;
  opt.root = 0;
  EXPECT_THROW(matrix_inverse_root(test::host_view(o2, {2, 2}), test::host_view(sq, {2, 2}), opt), UnsupportedError);
  opt.root = 2.5;
  opt.method = RootMethod::newton;
  EXPECT_THROW(matrix_inverse_root(test::host_view(o2, {2, 2}), test::host_view(sq, {2, 2}), opt), UnsupportedError);
  opt.method = RootMethod::eigh;  // fractional roots are fine by eigendecomposition
  matrix_inverse_root(test::host_view(o2, {2, 2}), test::host_view(sq, {2, 2}), opt);
  EXPECT_NEAR(o2[0], 1.0, 1e-6);
}

}  // namespace
}  // namespace precon::kernels
