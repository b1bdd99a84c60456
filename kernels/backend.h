// Backend selection, device memory and thread control.
// The backend (CPU or CUDA) is chosen once per process; tensors carry their device and every
// op dispatches on it. Thread-safety: set_* functions are for process start-up only.
#pragma once

#include <cstddef>

#include "kernels/tensor.h"

namespace precon::kernels {

bool cuda_compiled();   // the CUDA backend (its plugin) is part of this build
bool cuda_available();  // its plugin loads and at least one GPU is visible; never throws
void require_device(Device device);  // throws UnsupportedError (PluginError: no plugin) if this process cannot use it

// CPU threads for OpenBLAS and OpenMP loops (one pool when OpenBLAS is the OpenMP build).
void set_cpu_threads(int threads);

// The device's free memory in bytes (CUDA: the current GPU's, cudaMemGetInfo); -1 for the CPU,
// whose memory the operating system reports (/proc/meminfo, the cgroup's limit).
double device_free_bytes(Device device);

void* device_malloc(Device device, size_t bytes);
void device_free(Device device, void* ptr);
void synchronize(Device device);

// Copies between any two devices; shapes must match, dtypes must match, both contiguous.
void copy(Tensor dst, const Tensor& src);
void fill_zero(Tensor dst);

// Owns one allocation on one device; move-only. Carve Tensor views out of it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // A contiguous view starting at a byte offset.
  Tensor view(std::initializer_list<int64_t> shape, DType dtype = DType::f32, size_t offset = 0) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

}  // namespace precon::kernels
