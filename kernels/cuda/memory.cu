#include <string>

#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

int device_count() {
  // Cached: the answer cannot change within a process, and the first query initialises the driver.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error so later calls do not see it
      return 0;
    }
    return n;
  }();
  return count;
}

void select_device(int local_rank) {
  int count = device_count();
  if (count > 0) PRECON_CUDA_CHECK(cudaSetDevice(local_rank % count));
}

void memory_info(size_t* free_bytes, size_t* total_bytes) {
  PRECON_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

void* device_malloc(size_t bytes) {
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    detail::throw_cuda(status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), __FILE__, __LINE__);
  }
  return ptr;
}

// Called from Buffer's destructor, so it must not throw: a failure here is a sticky error from
// earlier work, which the next checked call reports.
void device_free(void* ptr) { (void)cudaFree(ptr); }

void synchronize() { PRECON_CUDA_CHECK(cudaDeviceSynchronize()); }

void copy(Tensor dst, const Tensor& src) {
  PRECON_CUDA_CHECK(cudaMemcpy(dst.data, src.data, src.nbytes(), cudaMemcpyDefault));
}

void fill_zero(Tensor dst) { PRECON_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, dst.nbytes(), 0)); }

}  // namespace precon::kernels::cuda
