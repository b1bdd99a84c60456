// Symmetric eigendecomposition on cuSOLVER syevd, the eigen-reconstruction Q diag(d) Qᵀ and the
// orthonormal factor of a QR decomposition (geqrf + orgqr).
// cuSOLVER is column-major: a symmetric input reads the same either way, but the eigenvectors
// come back as columns of a column-major matrix, i.e. rows in our row-major view, so the
// result is transposed into the contract's row-major Q with eigenvectors as columns.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

namespace {

using detail::grid_for;
using detail::Scratch;

constexpr int kThreads = 256;

__global__ void to_double_kernel(double* out, const float* in, int64_t n) {
  PRECON_GRID_STRIDE(i, n) out[i] = in[i];
}

// out (n, n) row-major = inᵀ where in is n x n, rounded to fp32.
__global__ void transpose_from_double_kernel(float* out, const double* in, int64_t n) {
  PRECON_GRID_STRIDE(idx, n * n) {
    int64_t i = idx / n, j = idx % n;
    out[idx] = static_cast<float>(in[j * n + i]);
  }
}

__global__ void from_double_kernel(float* out, const double* in, int64_t n) {
  PRECON_GRID_STRIDE(i, n) out[i] = static_cast<float>(in[i]);
}

// w[i, j] = q[i, j] * sqrt(d[j])
__global__ void scale_columns_kernel(float* w, const float* q, const float* d, int64_t n) {
  PRECON_GRID_STRIDE(idx, n * n) w[idx] = q[idx] * sqrtf(d[idx % n]);
}

int read_info(const Scratch& info) {
  int host_info = 0;
  PRECON_CUDA_CHECK(cudaMemcpy(&host_info, info.get(), sizeof(int), cudaMemcpyDeviceToHost));
  return host_info;
}

bool eigh_f32(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a, int64_t n) {
  cusolverDnHandle_t h = detail::cusolver();
  Scratch work_matrix(n * n * sizeof(float));
  Tensor w = work_matrix.view({n, n}, DType::f32);
  detail::strided_convert(w, a);
  int lwork = 0;
  float* values = static_cast<float*>(eigenvalues.data);
  PRECON_CUSOLVER_CHECK(cusolverDnSsyevd_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, int(n),
                                                    w.f32(), int(n), values, &lwork));
  Scratch work(size_t(lwork) * sizeof(float)), info(sizeof(int));
  PRECON_CUSOLVER_CHECK(cusolverDnSsyevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, int(n), w.f32(),
                                         int(n), values, static_cast<float*>(work.get()), lwork,
                                         static_cast<int*>(info.get())));
  if (read_info(info) != 0) return false;
  detail::strided_convert(eigenvectors, w.transposed());
  return true;
}

bool eigh_f64(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a, int64_t n) {
  cusolverDnHandle_t h = detail::cusolver();
  Scratch work_matrix(n * n * sizeof(double)), values(n * sizeof(double));
  double* w = static_cast<double*>(work_matrix.get());
  double* d = static_cast<double*>(values.get());
  to_double_kernel<<<grid_for(n * n, kThreads), kThreads>>>(w, static_cast<const float*>(a.data), n * n);
  PRECON_CUDA_LAUNCHED("to_double_kernel");
  int lwork = 0;
  PRECON_CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, int(n), w,
                                                    int(n), d, &lwork));
  Scratch work(size_t(lwork) * sizeof(double)), info(sizeof(int));
  PRECON_CUSOLVER_CHECK(cusolverDnDsyevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, int(n), w, int(n), d,
                                         static_cast<double*>(work.get()), lwork, static_cast<int*>(info.get())));
  if (read_info(info) != 0) return false;
  transpose_from_double_kernel<<<grid_for(n * n, kThreads), kThreads>>>(static_cast<float*>(eigenvectors.data), w,
                                                                         n);
  PRECON_CUDA_LAUNCHED("transpose_from_double_kernel");
  from_double_kernel<<<grid_for(n, kThreads), kThreads>>>(static_cast<float*>(eigenvalues.data), d, n);
  PRECON_CUDA_LAUNCHED("from_double_kernel");
  return true;
}

}  // namespace

bool symmetric_eigh(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a, bool fp64) {
  int64_t n = a.shape[0];
  if (n == 0) return true;
  return fp64 ? eigh_f64(eigenvalues, eigenvectors, a, n) : eigh_f32(eigenvalues, eigenvectors, a, n);
}

// out = (Q √D)(Q √D)ᵀ: one column scaling and a SYRK, exactly symmetric by construction.
void eigen_reconstruct(Tensor out, const Tensor& q, const std::vector<float>& d) {
  int64_t n = q.shape[0];
  if (n == 0) return;
  Scratch values(n * sizeof(float)), scaled(n * n * sizeof(float));
  PRECON_CUDA_CHECK(cudaMemcpy(values.get(), d.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Tensor w = scaled.view({n, n}, DType::f32);
  scale_columns_kernel<<<grid_for(n * n, kThreads), kThreads>>>(w.f32(), static_cast<const float*>(q.data),
                                                               static_cast<const float*>(values.get()), n);
  PRECON_CUDA_LAUNCHED("scale_columns_kernel");
  cuda::syrk(out, w, Trans::no, 1.0f, 0.0f);
}

// cuSOLVER is column-major: A (m, n) row-major is copied to its transpose (n, m) row-major, which
// is A column-major; geqrf + orgqr leave Q there, and the transposed view copies it back.
void qr_orthonormal(Tensor q, const Tensor& a) {
  const int64_t m = a.shape[0], n = a.shape[1];
  cusolverDnHandle_t h = detail::cusolver();
  Scratch matrix(m * n * sizeof(float)), tau(n * sizeof(float)), info(sizeof(int));
  Tensor w = matrix.view({n, m}, DType::f32);
  detail::strided_convert(w, a.transposed());
  int lwork_qr = 0, lwork_q = 0;
  float* pw = w.f32();
  float* ptau = static_cast<float*>(tau.get());
  PRECON_CUSOLVER_CHECK(cusolverDnSgeqrf_bufferSize(h, int(m), int(n), pw, int(m), &lwork_qr));
  PRECON_CUSOLVER_CHECK(cusolverDnSorgqr_bufferSize(h, int(m), int(n), int(n), pw, int(m), ptau, &lwork_q));
  const int lwork = std::max(lwork_qr, lwork_q);
  Scratch work(size_t(std::max(lwork, 1)) * sizeof(float));
  float* pwork = static_cast<float*>(work.get());
  int* pinfo = static_cast<int*>(info.get());
  PRECON_CUSOLVER_CHECK(cusolverDnSgeqrf(h, int(m), int(n), pw, int(m), ptau, pwork, lwork, pinfo));
  if (read_info(info) != 0) PRECON_THROW(NumericalError, "qr_orthonormal", "cuSOLVER's geqrf rejected a " + a.describe());
  PRECON_CUSOLVER_CHECK(cusolverDnSorgqr(h, int(m), int(n), int(n), pw, int(m), ptau, pwork, lwork, pinfo));
  if (read_info(info) != 0) PRECON_THROW(NumericalError, "qr_orthonormal", "cuSOLVER's orgqr rejected a " + a.describe());
  detail::strided_convert(q, w.transposed());
}

}  // namespace precon::kernels::cuda
