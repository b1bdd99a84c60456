#include <string>

#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda::detail {

namespace {

const char* cusolver_status_name(cusolverStatus_t status) {
  switch (status) {
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default: return "cuSOLVER error";
  }
}

}  // namespace

void throw_cuda(cudaError_t status, const char* call, const char* file, int line) {
  std::string message = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation) {
    message += " (reduce the batch size or free GPU memory)";
    throw OutOfMemoryError(call, message, file, line);
  }
  throw BackendError(call, message, file, line);
}

void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  throw BackendError(call, std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status), file,
                     line);
}

void throw_cusolver(cusolverStatus_t status, const char* call, const char* file, int line) {
  throw BackendError(call, std::string(cusolver_status_name(status)) + " (" + std::to_string(int(status)) + ")",
                     file, line);
}

// The handles are deliberately never destroyed: at process exit the CUDA runtime may already
// be torn down, and destroying them then fails.
cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    PRECON_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  return handle;
}

cusolverDnHandle_t cusolver() {
  static cusolverDnHandle_t handle = [] {
    cusolverDnHandle_t h = nullptr;
    PRECON_CUSOLVER_CHECK(cusolverDnCreate(&h));
    return h;
  }();
  return handle;
}

Scratch::Scratch(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) PRECON_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, 0));
}

Scratch::~Scratch() {
  // A failure here would already have been reported by the kernels that used the memory.
  if (ptr_) (void)cudaFreeAsync(ptr_, 0);
}

Tensor Scratch::view(std::initializer_list<int64_t> shape, DType dtype) const {
  Tensor t = Tensor::view(ptr_, shape, dtype, Device::cuda);
  PRECON_REQUIRE(t.nbytes() <= bytes_, ShapeError, "cuda::Scratch::view", "view larger than the scratch buffer");
  return t;
}

Layout4 layout4(const Tensor& t) {
  PRECON_REQUIRE(t.ndim <= 4, ShapeError, "cuda::layout4", "at most 4 dims, got " + t.describe());
  Layout4 l{};
  int pad = 4 - t.ndim;
  for (int d = 0; d < 4; ++d) {
    l.shape[d] = d < pad ? 1 : t.shape[d - pad];
    l.strides[d] = d < pad ? 0 : t.strides[d - pad];
  }
  return l;
}

Tensor flatten_rows(const Tensor& t) {
  int64_t last = t.shape[t.ndim - 1];
  return t.reshape({last ? t.numel() / last : 0, last});
}

namespace {

__global__ void strided_convert_kernel(Elems dst, Layout4 dl, Elems src, Layout4 sl, int64_t n, float alpha,
                                       bool accumulate, bool contiguous) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t di = contiguous ? i : dl.offset(i);
    int64_t si = contiguous ? i : sl.offset(i);
    float v = alpha * src.get(si);
    if (accumulate) v += dst.get(di);
    dst.set(di, v);
  }
}

__global__ void mirror_upper_kernel(Elems c, int64_t n, int64_t ld, int64_t batch_stride, int64_t batch) {
  int64_t total = batch * n * n;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t b = idx / (n * n);
    int64_t i = (idx / n) % n;
    int64_t j = idx % n;
    if (i > j) {
      int64_t base = b * batch_stride;
      c.set(base + i * ld + j, c.get(base + j * ld + i));
    }
  }
}

// Block (32, 8): each x-lane owns a column, the y-lanes stride over rows; partial sums meet in
// shared memory and one atomic per column per block lands in an fp32 accumulator.
__global__ void column_sums_kernel(float* sums, Elems x, int64_t rows, int64_t cols) {
  __shared__ float partial[8][33];
  int64_t col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < cols) {
    for (int64_t r = blockIdx.y * 8 + threadIdx.y; r < rows; r += int64_t(gridDim.y) * 8) acc += x.get(r * cols + col);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int k = 1; k < 8; ++k) acc += partial[k][threadIdx.x];
    atomicAdd(sums + col, acc);
  }
}

__global__ void add_f32_kernel(Elems out, const float* v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out.set(i, out.get(i) + v[i]);
}

}  // namespace

void strided_convert(Tensor dst, const Tensor& src, float alpha, bool accumulate) {
  int64_t n = dst.numel();
  if (n == 0) return;
  bool contiguous = dst.contiguous() && src.contiguous();
  strided_convert_kernel<<<grid_for(n, 256), 256>>>(elems(dst), layout4(dst), elems(src), layout4(src), n, alpha,
                                                    accumulate, contiguous);
  PRECON_CUDA_LAUNCHED("strided_convert_kernel");
}

void mirror_upper(Tensor c) {
  int64_t n = c.size(-1);
  int64_t batch = c.ndim == 3 ? c.shape[0] : 1;
  int64_t batch_stride = c.ndim == 3 ? c.strides[0] : 0;
  int64_t ld = c.strides[c.ndim - 2];
  if (n < 2 || batch == 0) return;
  mirror_upper_kernel<<<grid_for(batch * n * n, 256), 256>>>(elems(c), n, ld, batch_stride, batch);
  PRECON_CUDA_LAUNCHED("mirror_upper_kernel");
}

void add_column_sums(Tensor out, const Tensor& x) {
  int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0 || cols == 0) return;
  Scratch sums(cols * sizeof(float));
  PRECON_CUDA_CHECK(cudaMemsetAsync(sums.get(), 0, cols * sizeof(float), 0));
  int64_t row_blocks = (rows + 63) / 64;
  dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(row_blocks > 1024 ? 1024 : row_blocks));
  column_sums_kernel<<<grid, dim3(32, 8)>>>(static_cast<float*>(sums.get()), elems(x), rows, cols);
  PRECON_CUDA_LAUNCHED("column_sums_kernel");
  add_f32_kernel<<<grid_for(cols, 256), 256>>>(elems(out), static_cast<float*>(sums.get()), cols);
  PRECON_CUDA_LAUNCHED("add_f32_kernel");
}

}  // namespace precon::kernels::cuda::detail
