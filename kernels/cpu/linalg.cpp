// CPU linear algebra: OpenBLAS for products, LAPACKE for eigendecompositions, OpenMP loops for
// elementwise work.
#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/error.h"

namespace precon::kernels::cpu {

namespace {

CBLAS_TRANSPOSE blas_trans(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

// Row stride of a 2-D operand, at least 1 as BLAS requires.
int ld(const Tensor& t) { return static_cast<int>(std::max<int64_t>(t.ndim == 3 ? t.shape[2] : t.strides[0], 1)); }

void gemm_2d(float* c, int ldc, const float* a, int lda, const float* b, int ldb, int m, int n, int k,
             Trans trans_a, Trans trans_b, float alpha, float beta) {
  cblas_sgemm(CblasRowMajor, blas_trans(trans_a), blas_trans(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

// Copies the upper triangle of an n x n row-major matrix into its lower triangle, in blocks so
// both the reads and the writes stay in cache.
void mirror_upper(float* c, int64_t n, int64_t ldc) {
  constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t ib = 0; ib < n; ib += kBlock) {
    for (int64_t jb = 0; jb <= ib; jb += kBlock) {
      int64_t i_end = std::min(ib + kBlock, n), j_end = std::min(jb + kBlock, n);
      for (int64_t i = ib; i < i_end; ++i)
        for (int64_t j = jb; j < std::min(j_end, i); ++j) c[i * ldc + j] = c[j * ldc + i];
    }
  }
}

}  // namespace

void gemm(Tensor c, const Tensor& a, const Tensor& b, Trans trans_a, Trans trans_b, float alpha, float beta) {
  int m = static_cast<int>(c.size(-2)), n = static_cast<int>(c.size(-1));
  int k = static_cast<int>(trans_a == Trans::no ? a.size(-1) : a.size(-2));
  if (c.ndim == 2) {
    gemm_2d(c.f32(), ld(c), a.f32(), ld(a), b.f32(), ld(b), m, n, k, trans_a, trans_b, alpha, beta);
    return;
  }
  int64_t sa = a.shape[1] * a.shape[2], sb = b.shape[1] * b.shape[2], sc = c.shape[1] * c.shape[2];
  for (int64_t i = 0; i < c.shape[0]; ++i) {
    gemm_2d(c.f32() + i * sc, ld(c), a.f32() + i * sa, ld(a), b.f32() + i * sb, ld(b), m, n, k, trans_a,
            trans_b, alpha, beta);
  }
}

void syrk(Tensor c, const Tensor& a, Trans trans, float alpha, float beta) {
  int n = static_cast<int>(c.shape[0]);
  int k = static_cast<int>(trans == Trans::no ? a.shape[1] : a.shape[0]);
  cblas_ssyrk(CblasRowMajor, CblasUpper, blas_trans(trans), n, k, alpha, a.f32(), ld(a), beta, c.f32(), ld(c));
  mirror_upper(c.f32(), n, ld(c));
}

void axpby(Tensor y, const Tensor& x, float alpha, float beta) {
  float* py = y.f32();
  const float* px = x.f32();
  int64_t n = y.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) py[i] = alpha * px[i] + beta * py[i];
}

void cautious_axpby(Tensor y, const Tensor& x, float alpha, float beta) {
  float* py = y.f32();
  const float* px = x.f32();
  int64_t n = y.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float step = alpha * px[i];
    py[i] = step + (step * py[i] < 0.0f ? beta : 1.0f) * py[i];
  }
}

void scale(Tensor x, float alpha) {
  float* p = x.f32();
  int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] *= alpha;
}

void add(Tensor out, const Tensor& a, const Tensor& b) {
  float* po = out.f32();
  const float *pa = a.f32(), *pb = b.f32();
  int64_t n = out.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void transpose(Tensor out, const Tensor& in) {
  constexpr int64_t kBlock = 32;
  int64_t rows = in.shape[0], cols = in.shape[1], lda = in.strides[0];
  const float* pi = in.f32();
  float* po = out.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t ib = 0; ib < rows; ib += kBlock)
    for (int64_t jb = 0; jb < cols; jb += kBlock)
      for (int64_t i = ib; i < std::min(ib + kBlock, rows); ++i)
        for (int64_t j = jb; j < std::min(jb + kBlock, cols); ++j) po[j * rows + i] = pi[i * lda + j];
}

void cast(Tensor out, const Tensor& in) {
  int64_t n = in.numel();
  if (in.dtype == out.dtype) {
    cpu::copy(out, in);
  } else if (in.dtype == DType::f32) {
    const float* pi = in.f32();
    bf16* po = out.b16();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = float_to_bf16(pi[i]);
  } else {
    const bf16* pi = in.b16();
    float* po = out.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) po[i] = bf16_to_float(pi[i]);
  }
}

double sum_squares(const Tensor& x) {
  const float* p = x.f32();
  int64_t n = x.numel();
  double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  return total;
}

void sum_squares_along(Tensor out, const Tensor& x, int dim) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  const float* p = x.f32();
  float* o = out.f32();
  if (dim == 0) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      double total = 0.0;
      for (int64_t j = 0; j < cols; ++j) total += static_cast<double>(p[i * cols + j]) * p[i * cols + j];
      o[i] = static_cast<float>(total);
    }
    return;
  }
  std::vector<double> total(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) total[size_t(j)] += static_cast<double>(p[i * cols + j]) * p[i * cols + j];
  for (int64_t j = 0; j < cols; ++j) o[j] = static_cast<float>(total[size_t(j)]);
}

void scale_along(Tensor x, const Tensor& s, int dim) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  float* p = x.f32();
  const float* f = s.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] *= f[dim == 0 ? i : j];
}

void copy_strided(Tensor dst, const Tensor& src, float alpha, bool accumulate) {
  // Leading dims padded with size 1, as the CUDA backend's 4-D layouts are.
  int64_t shape[4] = {1, 1, 1, 1}, ds[4] = {0, 0, 0, 0}, ss[4] = {0, 0, 0, 0};
  for (int d = 0; d < dst.ndim; ++d) {
    const int o = 4 - dst.ndim + d;
    shape[o] = dst.shape[d];
    ds[o] = dst.strides[d];
    ss[o] = src.strides[d];
  }
  float* out = dst.f32();
  const float* in = src.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c) {
        float* o = out + a * ds[0] + b * ds[1] + c * ds[2];
        const float* i = in + a * ss[0] + b * ss[1] + c * ss[2];
        for (int64_t e = 0; e < shape[3]; ++e) {
          const float v = alpha * i[e * ss[3]];
          o[e * ds[3]] = accumulate ? o[e * ds[3]] + v : v;
        }
      }
}

bool all_finite(const Tensor& x) {
  const float* p = x.f32();
  int64_t n = x.numel();
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(p[i]);
  return bad == 0;
}

namespace {

// fp32 eigendecomposition as tridiagonal reduction (ssytrd), divide and conquer on the
// tridiagonal (sstedc), explicit Householder factor (sorgtr) and one GEMM. Forming the factor
// and multiplying is faster here than LAPACK's sormtr back-transform (ssyevd's last phase),
// and the GEMM writes the eigenvectors straight into row-major order.
bool eigh_fp32(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a) {
  const lapack_int n = static_cast<lapack_int>(a.shape[0]);
  const size_t nn = size_t(n) * n;
  // A symmetric matrix reads the same in either storage order, so LAPACK works on a copy of it
  // as column-major. Workspace sizes are computed, not queried: LAPACK's float workspace query
  // rounds too low for large n.
  // OpenBLAS's symv kernels (ssytrd's) read whole vector blocks past the end of a short vector:
  // each buffer gets kSlack floats of room so that such reads stay inside it (under
  // AddressSanitizer one reached an unmapped page beside a 9-float tau).
  constexpr size_t kSlack = 32;
  std::vector<float> h(nn + kSlack), z(nn + kSlack), e(std::max<lapack_int>(n - 1, 1) + kSlack), tau(e.size());
  std::copy(a.f32(), a.f32() + nn, h.begin());
  std::vector<float> work(std::max<size_t>(1 + 4 * size_t(n) + nn, size_t(n) * 64) + kSlack);
  std::vector<lapack_int> iwork(3 + 5 * size_t(n));
  float* d = eigenvalues.f32();
  const lapack_int lwork = static_cast<lapack_int>(work.size() - kSlack), liwork = static_cast<lapack_int>(iwork.size());
  if (LAPACKE_ssytrd_work(LAPACK_COL_MAJOR, 'L', n, h.data(), n, d, e.data(), tau.data(), work.data(), lwork) != 0)
    return false;
  if (LAPACKE_sstedc_work(LAPACK_COL_MAJOR, 'I', n, d, e.data(), z.data(), n, work.data(), lwork, iwork.data(),
                          liwork) != 0)
    return false;
  if (LAPACKE_sorgtr_work(LAPACK_COL_MAJOR, 'L', n, h.data(), n, tau.data(), work.data(), lwork) != 0) return false;
  // Q = H Z in column-major is Qᵀ = Zᵀ Hᵀ read row-major: ask BLAS for the latter directly.
  cblas_sgemm(CblasColMajor, CblasTrans, CblasTrans, n, n, n, 1.0f, z.data(), n, h.data(), n, 0.0f,
              eigenvectors.f32(), n);
  return true;
}

bool eigh_fp64(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a) {
  const lapack_int n = static_cast<lapack_int>(a.shape[0]);
  const size_t lwork = 1 + 6 * size_t(n) + 2 * size_t(n) * n, liwork = 3 + 5 * size_t(n);
  std::vector<lapack_int> iwork(liwork);
  std::vector<double> q(size_t(n) * n), w(n), work(lwork);
  const float* pa = a.f32();
  for (size_t i = 0; i < q.size(); ++i) q[i] = pa[i];
  if (LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'U', n, q.data(), n, w.data(), work.data(),
                          static_cast<lapack_int>(lwork), iwork.data(), static_cast<lapack_int>(liwork)) != 0)
    return false;
  float* pq = eigenvectors.f32();
  for (lapack_int i = 0; i < n; ++i)
    for (lapack_int j = 0; j < n; ++j) pq[size_t(i) * n + j] = static_cast<float>(q[size_t(j) * n + i]);
  for (lapack_int i = 0; i < n; ++i) eigenvalues.f32()[i] = static_cast<float>(w[i]);
  return true;
}

}  // namespace

bool symmetric_eigh(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a, bool fp64) {
  return fp64 ? eigh_fp64(eigenvalues, eigenvectors, a) : eigh_fp32(eigenvalues, eigenvectors, a);
}

void qr_orthonormal(Tensor q, const Tensor& a) {
  const lapack_int m = static_cast<lapack_int>(a.shape[0]), n = static_cast<lapack_int>(a.shape[1]);
  // Column-major copy (LAPACK's order), reflectors in place, then the explicit factor.
  std::vector<float> h(size_t(m) * n), tau(n);
  const float* pa = a.f32();
  for (lapack_int i = 0; i < m; ++i)
    for (lapack_int j = 0; j < n; ++j) h[size_t(j) * m + i] = pa[size_t(i) * n + j];
  std::vector<float> work(std::max<size_t>(size_t(n) * 64, 1));
  const lapack_int lwork = static_cast<lapack_int>(work.size());
  if (LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, m, n, h.data(), m, tau.data(), work.data(), lwork) != 0 ||
      LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, m, n, n, h.data(), m, tau.data(), work.data(), lwork) != 0) {
    PRECON_THROW(NumericalError, "qr_orthonormal", "LAPACK's QR rejected a " + a.describe());
  }
  float* pq = q.f32();
  for (lapack_int i = 0; i < m; ++i)
    for (lapack_int j = 0; j < n; ++j) pq[size_t(i) * n + j] = h[size_t(j) * m + i];
}

void eigen_reconstruct(Tensor out, const Tensor& q, const std::vector<float>& d) {
  // Q diag(d) Qᵀ = W Wᵀ with W = Q diag(√d): one symmetric rank-n product instead of two GEMMs.
  const int64_t n = q.shape[0];
  std::vector<float> w(size_t(n) * n);
  std::vector<float> root(d.size());
  for (size_t j = 0; j < d.size(); ++j) root[j] = std::sqrt(d[j]);
  const float* pq = q.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) w[i * n + j] = pq[i * n + j] * root[j];
  Tensor wt = Tensor::view(w.data(), {n, n});
  cpu::syrk(out, wt, Trans::no, 1.0f, 0.0f);
}

}  // namespace precon::kernels::cpu
