// CUDA linear algebra against the CPU path on the same random inputs: GEMM/SYRK (fp32 and
// bf16, transposes, strided views, batches), elementwise ops, reductions, eigh, Newton–Schulz
// and inverse roots. bf16 runs feed the CPU the same bf16-rounded inputs, so the tolerance
// only covers the GPU's rounding of its bf16 result. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/inverse_root.h"
#include "kernels/linalg.h"
#include "kernels/newton_schulz.h"
#include "tests/common/test_util.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace precon::kernels {
namespace {

using testing::round_bf16;
using testing::str;

// A device tensor of the given dtype holding v (rounded when bf16), owning its memory.
struct DeviceTensor {
  Buffer buffer;
  Tensor t;
};

DeviceTensor upload(const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dtype) {
  DeviceTensor d{Buffer(Device::cuda, v.size() * dtype_size(dtype)), {}};
  d.t = d.buffer.view(shape, dtype);
  if (dtype == DType::f32) {
    std::vector<float> host = v;
    copy(d.t, Tensor::view(host.data(), shape));
  } else {
    std::vector<bf16> host(v.size());
    for (size_t i = 0; i < v.size(); ++i) host[i] = float_to_bf16(v[i]);
    copy(d.t, Tensor::view(host.data(), shape, DType::bf16));
  }
  return d;
}

const char* name(DType d) { return dtype_name(d); }

struct CudaGemmCase {
  int64_t m, k, n;
};

// C = alpha op(A) op(B) + beta C for all transposes; A, B and C are views into wider buffers
// (row stride = cols + 3) so the leading-dimension handling is exercised.
void check_gemm(CudaGemmCase s, DType in, DType out, double tol) {
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed, " m,k,n ", s.m, ",", s.k, ",", s.n, " ", name(in), "->", name(out)));
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      int64_t ar = ta == Trans::no ? s.m : s.k, ac = ta == Trans::no ? s.k : s.m;
      int64_t br = tb == Trans::no ? s.k : s.n, bc = tb == Trans::no ? s.n : s.k;
      const int64_t pad = 3;
      auto a = test::random_normal(ar * (ac + pad), seed);
      auto b = test::random_normal(br * (bc + pad), seed + 1);
      auto c = test::random_normal(s.m * (s.n + pad), seed + 2);
      if (in == DType::bf16) a = round_bf16(a), b = round_bf16(b);
      if (out == DType::bf16) c = round_bf16(c);
      const float alpha = 0.75f, beta = -0.5f;
      std::vector<float> c_cpu = c;
      gemm(test::host_view(c_cpu, {s.m, s.n + pad}).narrow(1, 0, s.n),
           test::host_view(a, {ar, ac + pad}).narrow(1, 0, ac), test::host_view(b, {br, bc + pad}).narrow(1, 0, bc), ta,
           tb, alpha, beta);
      auto da = upload(a, {ar, ac + pad}, in), db = upload(b, {br, bc + pad}, in), dc = upload(c, {s.m, s.n + pad}, out);
      gemm(dc.t.narrow(1, 0, s.n), da.t.narrow(1, 0, ac), db.t.narrow(1, 0, bc), ta, tb, alpha, beta);
      auto c_gpu = test::to_host(dc.t);
      EXPECT_LE(test::rel_frobenius(c_gpu, c_cpu), tol) << "trans " << int(ta) << int(tb);
      // The padding columns must be untouched.
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = s.n; j < s.n + pad; ++j) ASSERT_EQ(c_gpu[i * (s.n + pad) + j], c[i * (s.n + pad) + j]);
    }
  }
}

const CudaGemmCase kGemmCases[] = {{1, 1, 1}, {7, 13, 5}, {64, 128, 96}, {129, 257, 65}};

TEST(CudaLinalg, GemmFp32) {
  SKIP_WITHOUT_CUDA();
  for (auto s : kGemmCases) check_gemm(s, DType::f32, DType::f32, 1e-5);  // fp32 accumulation order only
}

TEST(CudaLinalg, GemmBf16IntoFp32) {
  SKIP_WITHOUT_CUDA();
  for (auto s : kGemmCases) check_gemm(s, DType::bf16, DType::f32, 2e-5);  // exact products, fp32 sums
}

TEST(CudaLinalg, GemmBf16IntoBf16) {
  SKIP_WITHOUT_CUDA();
  for (auto s : kGemmCases) check_gemm(s, DType::bf16, DType::bf16, 8e-3);  // one bf16 rounding (2^-8)
}

TEST(CudaLinalg, GemmBatched) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  const int64_t batch = 3, m = 17, k = 9, n = 11;
  for (DType dt : {DType::f32, DType::bf16}) {
    auto a = test::random_normal(batch * k * m, seed), b = test::random_normal(batch * n * k, seed + 1);
    if (dt == DType::bf16) a = round_bf16(a), b = round_bf16(b);
    std::vector<float> c_cpu(batch * m * n);
    // op(A) = Aᵀ with A (k, m), op(B) = Bᵀ with B (n, k).
    gemm(test::host_view(c_cpu, {batch, m, n}), test::host_view(a, {batch, k, m}), test::host_view(b, {batch, n, k}),
         Trans::yes, Trans::yes);
    auto da = upload(a, {batch, k, m}, dt), db = upload(b, {batch, n, k}, dt);
    auto dc = upload(std::vector<float>(batch * m * n, 0.0f), {batch, m, n}, DType::f32);
    gemm(dc.t, da.t, db.t, Trans::yes, Trans::yes);
    EXPECT_LE(test::rel_frobenius(test::to_host(dc.t), c_cpu), 2e-5) << name(dt);  // fp32 accumulation
  }
}

TEST(CudaLinalg, SyrkWritesFullSymmetricMatrix) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {5, 9}, {33, 17}, {96, 160}}) {
    for (Trans tr : {Trans::no, Trans::yes}) {
      for (DType dt : {DType::f32, DType::bf16}) {
        int64_t ar = tr == Trans::no ? n : k, ac = tr == Trans::no ? k : n;
        auto a = test::random_normal(ar * ac, seed);
        auto c0 = test::random_normal(n * n, seed + 1);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < i; ++j) c0[i * n + j] = c0[j * n + i];  // a symmetric C for beta
        if (dt == DType::bf16) a = round_bf16(a), c0 = round_bf16(c0);
        std::vector<float> c_cpu = c0;
        syrk(test::host_view(c_cpu, {n, n}), test::host_view(a, {ar, ac}), tr, 0.5f, 2.0f);
        auto da = upload(a, {ar, ac}, dt), dc = upload(c0, {n, n}, dt);
        syrk(dc.t, da.t, tr, 0.5f, 2.0f);
        auto c_gpu = test::to_host(dc.t);
        // fp32: summation order; bf16: the result is rounded to bf16 once.
        EXPECT_LE(test::rel_frobenius(c_gpu, c_cpu), dt == DType::f32 ? 1e-5 : 8e-3)
            << n << "x" << k << " trans " << int(tr) << " " << name(dt);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < i; ++j) ASSERT_EQ(c_gpu[i * n + j], c_gpu[j * n + i]) << "not symmetric";
      }
    }
  }
}

TEST(CudaLinalg, ElementwiseAndReductions) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (int64_t n : {int64_t(1), int64_t(1001), int64_t(1) << 18}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(str(n, " ", name(dt)));
      // Outputs are rounded to bf16 once: relative 2^-9 per element.
      const double tol = dt == DType::f32 ? 1e-6 : 4e-3;
      auto x = test::random_normal(n, seed), y = test::random_normal(n, seed + 1);
      if (dt == DType::bf16) x = round_bf16(x), y = round_bf16(y);
      auto dx = upload(x, {n}, dt), dy = upload(y, {n}, dt);

      std::vector<float> y_cpu = y;
      axpby(test::host_view(y_cpu, {n}), test::host_view(x, {n}), 1.5f, -0.25f);
      axpby(dy.t, dx.t, 1.5f, -0.25f);
      EXPECT_LE(test::max_rel_diff(test::to_host(dy.t), y_cpu, 1e-3), tol) << "axpby";

      std::vector<float> x_cpu = x;
      scale(test::host_view(x_cpu, {n}), -3.0f);
      scale(dx.t, -3.0f);
      EXPECT_LE(test::max_rel_diff(test::to_host(dx.t), x_cpu, 1e-3), tol) << "scale";

      // add on the values the GPU holds now, so both sides start from identical inputs.
      auto xg = test::to_host(dx.t), yg = test::to_host(dy.t);
      std::vector<float> sum_cpu(n);
      add(test::host_view(sum_cpu, {n}), test::host_view(xg, {n}), test::host_view(yg, {n}));
      auto dsum = upload(std::vector<float>(n, 0.0f), {n}, dt);
      add(dsum.t, dx.t, dy.t);
      EXPECT_LE(test::max_rel_diff(test::to_host(dsum.t), sum_cpu, 1e-3), tol) << "add";

      // Sums of squares in double: the GPU and CPU agree to double rounding of the same terms.
      auto xs = test::to_host(dx.t);
      double ss_cpu = sum_squares(test::host_view(xs, {n}));
      EXPECT_NEAR(sum_squares(dx.t), ss_cpu, 1e-10 * ss_cpu) << "sum_squares";

      EXPECT_TRUE(all_finite(dx.t));
      std::vector<float> bad = x;
      bad[n / 2] = NAN;
      EXPECT_FALSE(all_finite(upload(bad, {n}, dt).t));
      bad[n / 2] = -INFINITY;
      EXPECT_FALSE(all_finite(upload(bad, {n}, dt).t));

      fill_zero(dx.t);
      EXPECT_EQ(test::max_abs_diff(test::to_host(dx.t), std::vector<float>(n, 0.0f)), 0.0) << "fill_zero";
    }
  }
}

TEST(CudaLinalg, TransposeAndCast) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 7}, {13, 5}, {300, 257}}) {
    auto x = round_bf16(test::random_normal(r * c, seed));
    std::vector<float> t_cpu(r * c);
    transpose(test::host_view(t_cpu, {c, r}), test::host_view(x, {r, c}));
    for (DType dt : {DType::f32, DType::bf16}) {
      auto dx = upload(x, {r, c}, dt), dt_out = upload(std::vector<float>(r * c), {c, r}, dt);
      transpose(dt_out.t, dx.t);
      EXPECT_EQ(test::max_abs_diff(test::to_host(dt_out.t), t_cpu), 0.0) << "transpose is exact";
    }
    // f32 -> bf16 -> f32 rounds like the host's float_to_bf16 (both round to nearest even).
    auto raw = test::random_normal(r * c, seed + 1);
    auto d32 = upload(raw, {r, c}, DType::f32), d16 = upload(std::vector<float>(r * c), {r, c}, DType::bf16);
    cast(d16.t, d32.t);
    EXPECT_EQ(test::max_abs_diff(test::to_host(d16.t), round_bf16(raw)), 0.0) << "cast f32->bf16";
    cast(d32.t, d16.t);
    EXPECT_EQ(test::max_abs_diff(test::to_host(d32.t), round_bf16(raw)), 0.0) << "cast bf16->f32";
  }
}

// A = G Gᵀ / k + shift I: symmetric positive definite with a spread spectrum.
std::vector<float> random_spd(int64_t n, uint64_t seed, float shift) {
  int64_t k = n + 3;
  auto g = test::random_normal(n * k, seed);
  std::vector<float> a(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += double(g[i * k + l]) * g[j * k + l];
      a[i * n + j] = static_cast<float>(s / k) + (i == j ? shift : 0.0f);
    }
  return a;
}

TEST(CudaLinalg, SymmetricEighAndReconstruct) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (int64_t n : {1, 5, 33, 128}) {
    for (bool fp64 : {false, true}) {
      SCOPED_TRACE(str("n ", n, (fp64 ? " fp64" : " fp32")));
      auto a = random_spd(n, seed, 0.1f);
      std::vector<float> w_cpu(n), q_cpu(n * n);
      ASSERT_TRUE(symmetric_eigh(test::host_view(w_cpu, {n}), test::host_view(q_cpu, {n, n}),
                                 test::host_view(a, {n, n}), fp64));
      auto da = upload(a, {n, n}, DType::f32), dw = upload(std::vector<float>(n), {n}, DType::f32);
      auto dq = upload(std::vector<float>(n * n), {n, n}, DType::f32);
      ASSERT_TRUE(symmetric_eigh(dw.t, dq.t, da.t, fp64));
      auto w = test::to_host(dw.t), q = test::to_host(dq.t);
      // Eigenvalues ascending and equal to the CPU's up to fp32 solver error (relative to ‖A‖).
      EXPECT_LE(test::max_abs_diff(w, w_cpu), 1e-5 * (std::fabs(w_cpu[n - 1]) + 1.0));
      for (int64_t i = 1; i < n; ++i) EXPECT_LE(w[i - 1], w[i]);
      // Eigenvectors are determined up to sign, so check A Q = Q diag(w) (backward-stable: ~n·eps).
      double err = 0, norm = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double aq = 0;
          for (int64_t l = 0; l < n; ++l) aq += double(a[i * n + l]) * q[l * n + j];
          err += (aq - double(q[i * n + j]) * w[j]) * (aq - double(q[i * n + j]) * w[j]);
          norm += aq * aq;
        }
      EXPECT_LE(std::sqrt(err / std::max(norm, 1e-30)), 5e-5) << "A Q != Q diag(w): eigenvectors not columns?";

      // Reconstruction with d = w (all > 0) gives A back, matching the CPU's reconstruction.
      std::vector<float> d(w_cpu.begin(), w_cpu.end()), rec_cpu(n * n);
      eigen_reconstruct(test::host_view(rec_cpu, {n, n}), test::host_view(q_cpu, {n, n}), d);
      auto dq_cpu = upload(q_cpu, {n, n}, DType::f32), drec = upload(std::vector<float>(n * n), {n, n}, DType::f32);
      eigen_reconstruct(drec.t, dq_cpu.t, d);
      EXPECT_LE(test::rel_frobenius(test::to_host(drec.t), rec_cpu), 1e-5) << "eigen_reconstruct";
    }
  }
}

std::vector<float> run_ns(const std::vector<float>& g, std::initializer_list<int64_t> shape, Device device,
                          DType compute) {
  NsOptions options{ns_schedule(ns_coefficient_set("keller"), 5), 1e-7f, compute};
  if (device == Device::cpu) {
    std::vector<float> in = g, out(g.size());
    newton_schulz(Tensor::view(out.data(), shape), Tensor::view(in.data(), shape), options);
    return out;
  }
  auto dg = upload(g, shape, compute), dout = upload(std::vector<float>(g.size()), shape, compute);
  newton_schulz(dout.t, dg.t, options);
  return test::to_host(dout.t);
}

TEST(CudaNewtonSchulz, MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [r, c] : {std::pair<int64_t, int64_t>{7, 13}, {13, 7}, {64, 96}, {96, 64}, {128, 128}}) {
    SCOPED_TRACE(str(r, "x", c));
    auto g = round_bf16(test::random_normal(r * c, seed));
    auto cpu = run_ns(g, {r, c}, Device::cpu, DType::f32);
    // fp32: 5 steps amplify rounding differences by up to |p'| per step (~3.4), so ~1e-4.
    EXPECT_LE(test::rel_frobenius(run_ns(g, {r, c}, Device::cuda, DType::f32), cpu), 1e-3) << "f32";
    // bf16: every product is rounded to bf16 (2^-9); Muon tolerates a few percent.
    EXPECT_LE(test::rel_frobenius(run_ns(g, {r, c}, Device::cuda, DType::bf16), cpu), 6e-2) << "bf16";
  }
}

TEST(CudaNewtonSchulz, BatchMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  const int64_t batch = 3, r = 16, c = 24;
  auto g = round_bf16(test::random_normal(batch * r * c, seed));
  auto cpu = run_ns(g, {batch, r, c}, Device::cpu, DType::f32);
  EXPECT_LE(test::rel_frobenius(run_ns(g, {batch, r, c}, Device::cuda, DType::f32), cpu), 1e-3);   // as above
  EXPECT_LE(test::rel_frobenius(run_ns(g, {batch, r, c}, Device::cuda, DType::bf16), cpu), 6e-2);  // as above
}

TEST(CudaInverseRoot, EighAndNewtonMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (int64_t n : {1, 5, 33, 96}) {
    for (RootMethod method : {RootMethod::eigh, RootMethod::newton}) {
      SCOPED_TRACE(str("n ", n, (method == RootMethod::eigh ? " eigh" : " newton")));
      auto a = random_spd(n, seed, 0.5f);
      InverseRootOptions options;
      options.root = 4.0;
      options.epsilon = 1e-6f;
      options.method = method;
      std::vector<float> cpu(n * n);
      matrix_inverse_root(test::host_view(cpu, {n, n}), test::host_view(a, {n, n}), options);
      auto da = upload(a, {n, n}, DType::f32), dout = upload(std::vector<float>(n * n), {n, n}, DType::f32);
      matrix_inverse_root(dout.t, da.t, options);
      // The spectrum lies in [0.5, ~5]: the root is well conditioned, fp32 solver error only.
      EXPECT_LE(test::rel_frobenius(test::to_host(dout.t), cpu), method == RootMethod::eigh ? 1e-4 : 1e-3);
    }
  }
}

// cuSOLVER's QR factor against the CPU's (LAPACK): the same columns up to sign.
TEST(CudaLinalg, QrOrthonormalMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {9, 4}, {128, 128}}) {
    SCOPED_TRACE(str(m, "x", n));
    auto a = test::random_normal(static_cast<size_t>(m * n), seed + m);
    std::vector<float> q_cpu(a.size());
    qr_orthonormal(test::host_view(q_cpu, {m, n}), test::host_view(a, {m, n}));
    auto da = upload(a, {m, n}, DType::f32), dq = upload(std::vector<float>(a.size()), {m, n}, DType::f32);
    qr_orthonormal(dq.t, da.t);
    auto q = test::to_host(dq.t);
    double err = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += double(q[i * n + j]) * q_cpu[i * n + j];
      for (int64_t i = 0; i < m; ++i) err = std::max(err, std::fabs(double(q[i * n + j]) - (dot < 0 ? -1.0 : 1.0) * q_cpu[i * n + j]));
    }
    EXPECT_LT(err, 5e-5);
  }
}

TEST(CudaLinalg, SumSquaresAndScaleAlongMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  const int64_t rows = 33, cols = 130;
  for (int dim : {0, 1}) {
    SCOPED_TRACE(str("dim ", dim));
    const int64_t n = dim == 0 ? rows : cols;
    auto x = test::random_normal(static_cast<size_t>(rows * cols), seed + dim);
    auto s = test::random_normal(static_cast<size_t>(n), seed + 3);
    std::vector<float> sums_cpu(n), y_cpu = x;
    sum_squares_along(test::host_view(sums_cpu, {n}), test::host_view(x, {rows, cols}), dim);
    scale_along(test::host_view(y_cpu, {rows, cols}), test::host_view(s, {n}), dim);
    auto dx = upload(x, {rows, cols}, DType::f32), ds = upload(s, {n}, DType::f32);
    auto dsums = upload(std::vector<float>(n), {n}, DType::f32);
    sum_squares_along(dsums.t, dx.t, dim);
    scale_along(dx.t, ds.t, dim);
    EXPECT_LT(test::rel_frobenius(test::to_host(dsums.t), sums_cpu), 1e-6);
    EXPECT_EQ(test::to_host(dx.t), y_cpu);
  }
}

}  // namespace
}  // namespace precon::kernels
