// GEMM, SYRK, elementwise primitives and the symmetric eigensolver against naive references.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/error.h"
#include "kernels/linalg.h"
#include "kernels/reference/linalg_reference.h"
#include "tests/common/test_util.h"

namespace precon::kernels {
namespace {

namespace ref = reference;

struct GemmCase {
  int64_t m, n, k;
  bool ta, tb;
};

TEST(LinalgGemm, MatchesReferenceAtOddShapes) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const GemmCase cases[] = {{1, 1, 1, false, false}, {7, 13, 5, false, false}, {7, 13, 5, true, false},
                            {7, 13, 5, false, true},  {7, 13, 5, true, true},   {300, 3, 17, false, false},
                            {3, 300, 17, true, true}, {64, 96, 128, false, true}, {129, 65, 257, true, false}};
  for (const GemmCase& gc : cases) {
    SCOPED_TRACE(::testing::Message() << gc.m << "x" << gc.n << "x" << gc.k << " ta=" << gc.ta << " tb=" << gc.tb);
    int64_t ar = gc.ta ? gc.k : gc.m, ac = gc.ta ? gc.m : gc.k;
    int64_t br = gc.tb ? gc.n : gc.k, bc = gc.tb ? gc.k : gc.n;
    auto a = test::random_normal(ar * ac, seed + 1), b = test::random_normal(br * bc, seed + 2);
    auto c = test::random_normal(gc.m * gc.n, seed + 3);
    auto expect = ref::to_float(ref::gemm(ref::from_float(a, ar, ac), ref::from_float(b, br, bc), gc.ta, gc.tb, 0.7,
                                          -1.3, ref::from_float(c, gc.m, gc.n)));
    gemm(test::host_view(c, {gc.m, gc.n}), test::host_view(a, {ar, ac}), test::host_view(b, {br, bc}),
         gc.ta ? Trans::yes : Trans::no, gc.tb ? Trans::yes : Trans::no, 0.7f, -1.3f);
    // fp32 dot products of length k with unit-normal terms: error ~ sqrt(k)·6e-8 relative to the
    // typical magnitude sqrt(k); 1e-4 relative with floor 1 leaves wide margin yet fails on any
    // wrong transpose or stride.
    EXPECT_LT(test::max_rel_diff(c, expect, 1.0), 1e-4);
  }
}

TEST(LinalgGemm, StridedViewAndBatch) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // A (5, 4) viewed as the middle columns of a (5, 10) matrix, as Q/K/V blocks of a fused weight.
  auto big = test::random_normal(5 * 10, seed);
  Tensor a = test::host_view(big, {5, 10}).narrow(1, 3, 4);
  std::vector<float> a_dense(5 * 4);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) a_dense[i * 4 + j] = big[i * 10 + 3 + j];
  auto b = test::random_normal(4 * 6, seed + 1);
  std::vector<float> c(5 * 6);
  gemm(test::host_view(c, {5, 6}), a, test::host_view(b, {4, 6}));
  auto expect = ref::to_float(ref::matmul(ref::from_float(a_dense, 5, 4), ref::from_float(b, 4, 6)));
  EXPECT_LT(test::max_abs_diff(c, expect), 1e-5);

  // Batch of 3 products equals three separate ones.
  auto ab = test::random_normal(3 * 4 * 5, seed + 2), bb = test::random_normal(3 * 5 * 2, seed + 3);
  std::vector<float> cb(3 * 4 * 2);
  gemm(test::host_view(cb, {3, 4, 2}), test::host_view(ab, {3, 4, 5}), test::host_view(bb, {3, 5, 2}));
  for (int i = 0; i < 3; ++i) {
    std::vector<float> ai(ab.begin() + i * 20, ab.begin() + (i + 1) * 20);
    std::vector<float> bi(bb.begin() + i * 10, bb.begin() + (i + 1) * 10);
    std::vector<float> ci(cb.begin() + i * 8, cb.begin() + (i + 1) * 8);
    EXPECT_LT(test::max_abs_diff(ci, ref::to_float(ref::matmul(ref::from_float(ai, 4, 5), ref::from_float(bi, 5, 2)))),
              1e-5);
  }
}

TEST(LinalgGemm, RejectsMismatchedShapesAndDtypes) {
  std::vector<float> a(6), b(6), c(4);
  EXPECT_THROW(gemm(test::host_view(c, {2, 2}), test::host_view(a, {2, 3}), test::host_view(b, {2, 3})), ShapeError);
  std::vector<int32_t> ints(6);
  EXPECT_THROW(gemm(test::host_view(c, {2, 2}), test::host_view_i32(ints, {2, 3}), test::host_view(b, {3, 2})),
               UnsupportedError);
  Tensor gpu = test::host_view(b, {3, 2});
  gpu.device = Device::cuda;
  EXPECT_THROW(gemm(test::host_view(c, {2, 2}), test::host_view(a, {2, 3}), gpu), ShapeError);
  try {
    gemm(test::host_view(c, {2, 2}), test::host_view(a, {2, 3}), test::host_view(b, {2, 3}));
  } catch (const KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("gemm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32[2,3]"), std::string::npos) << e.what();
  }
}

TEST(LinalgSyrk, WritesFullSymmetricMatrix) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {13, 7}, {70, 130}}) {
    for (bool trans : {false, true}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " trans=" << trans);
      auto a = test::random_normal(rows * cols, seed);
      int64_t n = trans ? cols : rows;
      auto c0 = ref::from_float(test::random_normal(n * n, seed + 1), n, n);
      c0 = ref::gemm(c0, ref::identity(n), false, false, 0.5, 0, c0);
      c0 = ref::gemm(ref::transpose(c0), ref::identity(n), false, false, 1, 1, c0);  // symmetric C
      auto c = ref::to_float(c0);
      auto am = ref::from_float(a, rows, cols);
      auto expect = ref::to_float(ref::gemm(am, am, trans, !trans, 2.0, 0.5, c0));
      syrk(test::host_view(c, {n, n}), test::host_view(a, {rows, cols}), trans ? Trans::yes : Trans::no, 2.0f, 0.5f);
      EXPECT_LT(test::max_rel_diff(c, expect, 1.0), 1e-4);
    }
  }
}

TEST(LinalgElementwise, MatchReference) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 1001;
  auto x = test::random_normal(n, seed), y = test::random_normal(n, seed + 1);
  std::vector<float> expect(n), out(n);
  for (int64_t i = 0; i < n; ++i) expect[i] = 2.5f * x[i] - 0.5f * y[i];
  const std::vector<float> y0 = y;
  axpby(test::host_view(y, {n}), test::host_view(x, {n}), 2.5f, -0.5f);
  EXPECT_LT(test::max_abs_diff(y, expect), 1e-6);

  // Cautious: the decay (beta) only where the step alpha·x and y have opposite signs.
  std::vector<float> yc = y0;
  int decayed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool toward_zero = -0.01f * x[i] * y0[i] < 0.0f;
    decayed += toward_zero;
    expect[i] = -0.01f * x[i] + (toward_zero ? 0.9f : 1.0f) * y0[i];
  }
  cautious_axpby(test::host_view(yc, {n}), test::host_view(x, {n}), -0.01f, 0.9f);
  EXPECT_LT(test::max_abs_diff(yc, expect), 1e-6);
  EXPECT_GT(decayed, n / 4);
  EXPECT_LT(decayed, 3 * n / 4);

  add(test::host_view(out, {n}), test::host_view(x, {n}), test::host_view(y, {n}));
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(out[i], x[i] + y[i]);

  double ss = 0;
  for (float v : x) ss += double(v) * v;
  EXPECT_NEAR(sum_squares(test::host_view(x, {n})), ss, 1e-9 * ss);

  auto m = test::random_normal(7 * 13, seed + 2);
  std::vector<float> mt(13 * 7);
  transpose(test::host_view(mt, {13, 7}), test::host_view(m, {7, 13}));
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 13; ++j) ASSERT_EQ(mt[j * 7 + i], m[i * 13 + j]);

  EXPECT_TRUE(all_finite(test::host_view(x, {n})));
  x[500] = NAN;
  EXPECT_FALSE(all_finite(test::host_view(x, {n})));
  x[500] = INFINITY;
  EXPECT_FALSE(all_finite(test::host_view(x, {n})));
}

TEST(LinalgCast, Bf16RoundTripIsNearestEven) {
  std::vector<float> in = {1.0f, -2.5f, 3.14159265f, 1e-30f, 65504.0f, 1.00390625f, 1.01171875f};
  std::vector<bf16> mid(in.size());
  std::vector<float> back(in.size());
  cast(Tensor::view(mid.data(), {7}, DType::bf16), test::host_view(in, {7}));
  cast(test::host_view(back, {7}), Tensor::view(mid.data(), {7}, DType::bf16));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_NEAR(back[2], 3.140625f, 0);  // 3.14159 rounds to the nearest bf16, 3.140625
  EXPECT_EQ(back[5], 1.0f);            // halfway 1 + 2^-8: ties to even (1.0)
  EXPECT_EQ(back[6], 1.015625f);       // halfway 1 + 3·2^-8: ties to even (1 + 2^-6)
  for (size_t i = 0; i < in.size(); ++i) EXPECT_LE(std::fabs(back[i] - in[i]), std::fabs(in[i]) / 256.0f);
}

// A = Q Λ Qᵀ: check A Q = Q Λ, QᵀQ = I, ascending eigenvalues, in fp32 and fp64 modes.
TEST(LinalgEigh, DecomposesSymmetricMatrices) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t n : {1, 2, 7, 64, 200}) {
    for (bool fp64 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " fp64=" << fp64);
      auto b = ref::from_float(test::random_normal(n * n, seed + n), n, n);
      auto am = ref::gemm(b, b, false, true, 1.0, 0.0, b);
      am = ref::gemm(am, ref::identity(n), false, false, 1, 0, am);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) am(i, j) -= 0.9 * am(i, j) * 2;  // keep symmetric, make indefinite
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) am(i, j) = am(j, i);
      auto a = ref::to_float(am);
      std::vector<float> w(n), q(n * n);
      ASSERT_TRUE(symmetric_eigh(test::host_view(w, {n}), test::host_view(q, {n, n}), test::host_view(a, {n, n}), fp64));
      auto qm = ref::from_float(q, n, n);
      auto aq = ref::matmul(ref::from_float(a, n, n), qm);
      double scale_a = 0;
      for (double v : am.v) scale_a = std::max(scale_a, std::fabs(v));
      double err = 0, orth = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) err = std::max(err, std::fabs(aq(i, j) - qm(i, j) * w[j]));
      auto qtq = ref::matmul(ref::transpose(qm), qm);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) orth = std::max(orth, std::fabs(qtq(i, j) - (i == j)));
      for (int64_t i = 1; i < n; ++i) EXPECT_LE(w[i - 1], w[i]);
      // Backward-stable solver: residual ~ n·u·‖A‖ with u = 6e-8 for fp32 (fp64 results are
      // rounded to fp32 on output, so the same bound applies).
      EXPECT_LT(err, 20.0 * n * 6e-8 * scale_a + 1e-6);
      EXPECT_LT(orth, 20.0 * n * 6e-8 + 1e-6);
    }
  }
}

TEST(LinalgEigenReconstruct, RebuildsMatrixFunction) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 9;
  auto b = ref::from_float(test::random_normal(n * n, seed), n, n);
  auto a = ref::to_float(ref::gemm(b, b, false, true, 1, 0, b));
  std::vector<float> w(n), q(n * n), out(n * n);
  ASSERT_TRUE(symmetric_eigh(test::host_view(w, {n}), test::host_view(q, {n, n}), test::host_view(a, {n, n}), false));
  std::vector<float> d(w.begin(), w.end());
  for (float& v : d) v = std::max(v, 0.0f);
  eigen_reconstruct(test::host_view(out, {n, n}), test::host_view(q, {n, n}), d);
  EXPECT_LT(test::rel_frobenius(out, a), 1e-5);
  d[0] = -1.0f;
  EXPECT_THROW(eigen_reconstruct(test::host_view(out, {n, n}), test::host_view(q, {n, n}), d), NumericalError);
}

// Householder QR's Q against Gram–Schmidt in double: equal up to each column's sign, and Q R = A
// with R = Qᵀ A upper triangular. Gaussian A is well conditioned (cond ≲ 10 for these shapes).
TEST(LinalgQr, OrthonormalFactorMatchesGramSchmidt) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 3}, {7, 7}, {64, 64}, {200, 120}}) {
    SCOPED_TRACE(::testing::Message() << m << "x" << n);
    std::vector<float> a = test::random_normal(static_cast<size_t>(m * n), seed + m * 1000 + n), q(a.size());
    qr_orthonormal(test::host_view(q, {m, n}), test::host_view(a, {m, n}));
    const ref::Matrix expect = ref::qr_orthonormal(ref::from_float(a, m, n)), qm = ref::from_float(q, m, n);
    double err = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += qm(i, j) * expect(i, j);
      const double sign = dot < 0 ? -1.0 : 1.0;
      for (int64_t i = 0; i < m; ++i) err = std::max(err, std::fabs(qm(i, j) - sign * expect(i, j)));
    }
    EXPECT_LT(err, 2e-5);
    const ref::Matrix r = ref::matmul(ref::transpose(qm), ref::from_float(a, m, n));
    double lower = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) lower = std::max(lower, std::fabs(r(i, j)));
    EXPECT_LT(lower, 1e-4) << "Qᵀ A is not upper triangular: Q does not span A's leading columns";
  }
  // In place (q and a the same tensor) gives the same factor.
  std::vector<float> a = test::random_normal(12, seed), q(12);
  qr_orthonormal(test::host_view(q, {4, 3}), test::host_view(a, {4, 3}));
  qr_orthonormal(test::host_view(a, {4, 3}), test::host_view(a, {4, 3}));
  EXPECT_EQ(a, q);
  std::vector<float> wide(6);
  EXPECT_THROW(qr_orthonormal(test::host_view(wide, {2, 3}), test::host_view(wide, {2, 3})), ShapeError);
}

// Per-row and per-column sums of squares and scaling (NorMuon's per-neuron normalisation) against
// plain double loops.
TEST(LinalgAlong, SumSquaresAndScaleAlongEitherDim) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 7, cols = 13;
  for (int dim : {0, 1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    std::vector<float> x = test::random_normal(rows * cols, seed + dim), sums(dim == 0 ? rows : cols);
    const int64_t n = static_cast<int64_t>(sums.size());
    sum_squares_along(test::host_view(sums, {n}), test::host_view(x, {rows, cols}), dim);
    for (int64_t k = 0; k < n; ++k) {
      double expect = 0;
      for (int64_t l = 0; l < (dim == 0 ? cols : rows); ++l) {
        const double v = dim == 0 ? x[k * cols + l] : x[l * cols + k];
        expect += v * v;
      }
      EXPECT_NEAR(sums[k], expect, 1e-6 * expect) << k;
    }
    std::vector<float> s = test::random_normal(n, seed + 7), y = x;
    scale_along(test::host_view(y, {rows, cols}), test::host_view(s, {n}), dim);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(y[i * cols + j], x[i * cols + j] * s[dim == 0 ? i : j]);
  }
  std::vector<float> x(6), wrong(4);
  EXPECT_THROW(sum_squares_along(test::host_view(wrong, {4}), test::host_view(x, {2, 3}), 1), ShapeError);
  EXPECT_THROW(scale_along(test::host_view(x, {2, 3}), test::host_view(wrong, {2}), 2), ShapeError);
}

}  // namespace
}  // namespace precon::kernels
