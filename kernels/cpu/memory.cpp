#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/cpu.h"
#include "kernels/error.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

namespace precon::kernels::cpu {

void set_threads(int threads) {
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}


void* device_malloc(size_t bytes) {
  // 64-byte alignment for vector loads; round the size up as aligned_alloc requires.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) PRECON_THROW(OutOfMemoryError, "device_malloc", "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

void device_free(void* ptr) { std::free(ptr); }

void synchronize() {}

void copy(Tensor dst, const Tensor& src) { std::memmove(dst.data, src.data, src.nbytes()); }

void fill_zero(Tensor dst) { std::memset(dst.data, 0, dst.nbytes()); }

}  // namespace precon::kernels::cpu
