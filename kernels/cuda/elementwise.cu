// Elementwise updates and reductions over f32/bf16 tensors; arithmetic in fp32, reductions in double.
#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

namespace {

using detail::Elems;
using detail::elems;
using detail::grid_for;

constexpr int kThreads = 256;

// beta == 0 does not read y (BLAS convention), so stale NaNs in an output buffer do not leak in.
__global__ void axpby_kernel(Elems y, Elems x, float alpha, float beta, int64_t n) {
  PRECON_GRID_STRIDE(i, n) {
    float v = alpha * x.get(i);
    if (beta != 0.0f) v += beta * y.get(i);
    y.set(i, v);
  }
}

__global__ void cautious_axpby_kernel(float* y, const float* x, float alpha, float beta, int64_t n) {
  PRECON_GRID_STRIDE(i, n) {
    const float step = alpha * x[i];
    y[i] = step + (step * y[i] < 0.0f ? beta : 1.0f) * y[i];
  }
}

__global__ void add_kernel(Elems out, Elems a, Elems b, int64_t n) {
  PRECON_GRID_STRIDE(i, n) out.set(i, a.get(i) + b.get(i));
}

__device__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void sum_squares_kernel(double* total, Elems x, int64_t n) {
  __shared__ double warp_totals[kThreads / 32];
  double acc = 0.0;
  PRECON_GRID_STRIDE(i, n) {
    double v = x.get(i);
    acc += v * v;
  }
  acc = warp_sum(acc);
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < kThreads / 32 ? warp_totals[threadIdx.x] : 0.0;
    acc = warp_sum(acc);
    if (threadIdx.x == 0) atomicAdd(total, acc);
  }
}

// One thread per output value: a row's (dim 0) or a column's (dim 1) sum of squares, in double.
__global__ void sum_squares_along_kernel(float* out, const float* x, int64_t rows, int64_t cols, int dim) {
  const int64_t n = dim == 0 ? rows : cols;
  PRECON_GRID_STRIDE(k, n) {
    double acc = 0.0;
    if (dim == 0) {
      for (int64_t j = 0; j < cols; ++j) acc += double(x[k * cols + j]) * x[k * cols + j];
    } else {
      for (int64_t i = 0; i < rows; ++i) acc += double(x[i * cols + k]) * x[i * cols + k];
    }
    out[k] = static_cast<float>(acc);
  }
}

__global__ void scale_along_kernel(float* x, const float* s, int64_t rows, int64_t cols, int dim) {
  PRECON_GRID_STRIDE(idx, rows * cols) x[idx] *= s[dim == 0 ? idx / cols : idx % cols];
}

__global__ void all_finite_kernel(int* finite, Elems x, int64_t n) {
  bool ok = true;
  PRECON_GRID_STRIDE(i, n) ok = ok && isfinite(x.get(i));
  if (__syncthreads_and(ok) == 0 && threadIdx.x == 0) *finite = 0;
}

// Reductions need far fewer blocks than the element count: each thread loops.
unsigned reduction_grid(int64_t n) {
  unsigned blocks = grid_for(n, kThreads * 8);
  return blocks > 1024 ? 1024 : blocks;
}

}  // namespace

void axpby(Tensor y, const Tensor& x, float alpha, float beta) {
  int64_t n = y.numel();
  axpby_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(y), elems(x), alpha, beta, n);
  PRECON_CUDA_LAUNCHED("axpby_kernel");
}

void cautious_axpby(Tensor y, const Tensor& x, float alpha, float beta) {
  int64_t n = y.numel();
  cautious_axpby_kernel<<<grid_for(n, kThreads), kThreads>>>(y.f32(), x.f32(), alpha, beta, n);
  PRECON_CUDA_LAUNCHED("cautious_axpby_kernel");
}

void scale(Tensor x, float alpha) {
  int64_t n = x.numel();
  axpby_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(x), elems(x), alpha, 0.0f, n);
  PRECON_CUDA_LAUNCHED("axpby_kernel");
}

void add(Tensor out, const Tensor& a, const Tensor& b) {
  int64_t n = out.numel();
  add_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(out), elems(a), elems(b), n);
  PRECON_CUDA_LAUNCHED("add_kernel");
}

void transpose(Tensor out, const Tensor& in) { detail::strided_convert(out, in.transposed()); }

void cast(Tensor out, const Tensor& in) {
  detail::strided_convert(out.reshape({out.numel()}), in.reshape({in.numel()}));
}

double sum_squares(const Tensor& x) {
  int64_t n = x.numel();
  detail::Scratch total(sizeof(double));
  PRECON_CUDA_CHECK(cudaMemsetAsync(total.get(), 0, sizeof(double), 0));
  sum_squares_kernel<<<reduction_grid(n), kThreads>>>(static_cast<double*>(total.get()), elems(x), n);
  PRECON_CUDA_LAUNCHED("sum_squares_kernel");
  double result = 0.0;
  PRECON_CUDA_CHECK(cudaMemcpy(&result, total.get(), sizeof(double), cudaMemcpyDeviceToHost));
  return result;
}

void sum_squares_along(Tensor out, const Tensor& x, int dim) {
  const int64_t rows = x.shape[0], cols = x.shape[1], n = dim == 0 ? rows : cols;
  sum_squares_along_kernel<<<grid_for(n, kThreads), kThreads>>>(out.f32(), x.f32(), rows, cols, dim);
  PRECON_CUDA_LAUNCHED("sum_squares_along_kernel");
}

void scale_along(Tensor x, const Tensor& s, int dim) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  scale_along_kernel<<<grid_for(rows * cols, kThreads), kThreads>>>(x.f32(), s.f32(), rows, cols, dim);
  PRECON_CUDA_LAUNCHED("scale_along_kernel");
}

void copy_strided(Tensor dst, const Tensor& src, float alpha, bool accumulate) {
  detail::strided_convert(dst, src, alpha, accumulate);
}

bool all_finite(const Tensor& x) {
  int64_t n = x.numel();
  detail::Scratch flag(sizeof(int));
  int one = 1;
  PRECON_CUDA_CHECK(cudaMemcpy(flag.get(), &one, sizeof(int), cudaMemcpyHostToDevice));
  all_finite_kernel<<<reduction_grid(n), kThreads>>>(static_cast<int*>(flag.get()), elems(x), n);
  PRECON_CUDA_LAUNCHED("all_finite_kernel");
  int finite = 0;
  PRECON_CUDA_CHECK(cudaMemcpy(&finite, flag.get(), sizeof(int), cudaMemcpyDeviceToHost));
  return finite != 0;
}

}  // namespace precon::kernels::cuda
