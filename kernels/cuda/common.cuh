// Shared pieces of the CUDA backend: error checks, the per-process library handles, scratch
// memory, launch helpers and a dtype-agnostic element accessor. Everything runs on the legacy
// default stream, so kernels, cuBLAS and cuSOLVER calls are ordered without events.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/cuda.h"
#include "kernels/error.h"

namespace precon::kernels::cuda::detail {

[[noreturn]] void throw_cuda(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cusolver(cusolverStatus_t status, const char* call, const char* file, int line);

// Library handles, created on first use and kept for the life of the process.
cublasHandle_t cublas();
cusolverDnHandle_t cusolver();

// Device scratch from the stream-ordered pool: freed in stream order, so it may be released
// while kernels that use it are still queued.
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  Tensor view(std::initializer_list<int64_t> shape, DType dtype) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Row kernels: a block of kRowThreads threads handles kRowsPerBlock rows, one warp a row.
constexpr int kRowThreads = 256;
constexpr int kRowsPerBlock = kRowThreads / 32;
inline unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// The sum of v over the 32 lanes of a warp, in every lane.
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Blocks for a grid-stride loop over n items; capped so huge tensors loop instead of overflowing.
inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > (1 << 20)) blocks = 1 << 20;
  return static_cast<unsigned>(blocks);
}

// A grid-stride loop over [0, n) for kernels launched with grid_for.
#define PRECON_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Reads and writes f32 or bf16 elements as float; the dtype branch is uniform across a warp.
struct Elems {
  void* ptr;
  bool bf16;
  __device__ float get(int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(ptr)[i]) : static_cast<const float*>(ptr)[i];
  }
  __device__ void set(int64_t i, float v) const {
    if (bf16)
      static_cast<__nv_bfloat16*>(ptr)[i] = __float2bfloat16(v);
    else
      static_cast<float*>(ptr)[i] = v;
  }
  __device__ void atomic_add(int64_t i, float v) const {
    if (bf16)
      atomicAdd(static_cast<__nv_bfloat16*>(ptr) + i, __float2bfloat16(v));
    else
      atomicAdd(static_cast<float*>(ptr) + i, v);
  }
};

inline Elems elems(const Tensor& t) { return Elems{t.data, t.dtype == DType::bf16}; }

// A 4-D index space with arbitrary element strides (leading dims padded with size 1).
struct Layout4 {
  int64_t shape[4];
  int64_t strides[4];
  __device__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = 3; d >= 0; --d) {
      int64_t i = linear % shape[d];
      linear /= shape[d];
      off += i * strides[d];
    }
    return off;
  }
};

Layout4 layout4(const Tensor& t);

// dst = alpha * src (+ dst when accumulate) elementwise over equal shapes with arbitrary strides
// and any mix of f32/bf16: copies, casts, transposes and head permutations in one kernel.
void strided_convert(Tensor dst, const Tensor& src, float alpha = 1.0f, bool accumulate = false);

// Copies the upper triangle of each square matrix in c (2-D or a 3-D batch) onto the lower one.
void mirror_upper(Tensor c);

// Adds the column sums of x (N, C), computed in fp32, into out (C): bias gradients.
void add_column_sums(Tensor out, const Tensor& x);

// A contiguous (N, last) view of a 2-D or 3-D contiguous tensor.
Tensor flatten_rows(const Tensor& t);

}  // namespace precon::kernels::cuda::detail

#define PRECON_CUDA_CHECK(call)                                                                        \
  do {                                                                                                 \
    cudaError_t precon_status_ = (call);                                                               \
    if (precon_status_ != cudaSuccess)                                                                 \
      ::precon::kernels::cuda::detail::throw_cuda(precon_status_, #call, __FILE__, __LINE__);          \
  } while (0)

#define PRECON_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                                 \
    cublasStatus_t precon_status_ = (call);                                                            \
    if (precon_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::precon::kernels::cuda::detail::throw_cublas(precon_status_, #call, __FILE__, __LINE__);        \
  } while (0)

#define PRECON_CUSOLVER_CHECK(call)                                                                    \
  do {                                                                                                 \
    cusolverStatus_t precon_status_ = (call);                                                          \
    if (precon_status_ != CUSOLVER_STATUS_SUCCESS)                                                     \
      ::precon::kernels::cuda::detail::throw_cusolver(precon_status_, #call, __FILE__, __LINE__);      \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here, with the kernel's name.
#define PRECON_CUDA_LAUNCHED(kernel_name)                                                              \
  do {                                                                                                 \
    cudaError_t precon_status_ = cudaGetLastError();                                                   \
    if (precon_status_ != cudaSuccess)                                                                 \
      ::precon::kernels::cuda::detail::throw_cuda(precon_status_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)
