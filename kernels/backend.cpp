#include "kernels/backend.h"

#include <utility>

#include "kernels/check.h"
#include "kernels/cuda_plugin.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"

namespace precon::kernels {

bool cuda_compiled() { return PRECON_HAVE_CUDA; }

// Loads the plugin when it is there; a missing one means no GPU here, not an error.
bool cuda_available() {
  if (!PRECON_HAVE_CUDA) return false;
  try {
    return cuda_backend().device_count() > 0;
  } catch (const PluginError&) {
    return false;
  }
}

void require_device(Device device) {
  if (device != Device::cuda) return;
  // Throws PluginError, naming the plugin's path, when the backend cannot be loaded.
  const BackendTable& cuda = cuda_backend();
  PRECON_REQUIRE(cuda.device_count() > 0, UnsupportedError, "require_device",
                 "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)");
}

double device_free_bytes(Device device) {
  if (device != Device::cuda) return -1;
  size_t free_bytes = 0, total_bytes = 0;
  cuda_backend().memory_info(&free_bytes, &total_bytes);
  return static_cast<double>(free_bytes);
}

void set_cpu_threads(int threads) {
  PRECON_REQUIRE(threads >= 1, UnsupportedError, "set_cpu_threads",
                 "thread count must be >= 1, got " + std::to_string(threads));
  cpu::set_threads(threads);
}

void* device_malloc(Device device, size_t bytes) { return PRECON_DISPATCH(device, device_malloc, bytes); }

void device_free(Device device, void* ptr) {
  if (ptr) PRECON_DISPATCH(device, device_free, ptr);
}

void synchronize(Device device) { PRECON_DISPATCH(device, synchronize); }

void copy(Tensor dst, const Tensor& src) {
  const char* op = "copy";
  require_dtype(op, "dst", dst, {src.dtype});
  require_numel(op, "dst", dst, src.numel());
  require_contiguous(op, "dst", dst);
  require_contiguous(op, "src", src);
  if (dst.numel() == 0) return;
  Device device = (dst.device == Device::cuda || src.device == Device::cuda) ? Device::cuda : Device::cpu;
  PRECON_DISPATCH(device, copy, dst, src);
}

void fill_zero(Tensor dst) {
  require_contiguous("fill_zero", "dst", dst);
  if (dst.numel() == 0) return;
  PRECON_DISPATCH(dst.device, fill_zero, dst);
}

Buffer::Buffer(Device device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes > 0) data_ = device_malloc(device, bytes);
}

Buffer::~Buffer() { device_free(device_, data_); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    device_free(device_, data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

Tensor Buffer::view(std::initializer_list<int64_t> shape, DType dtype, size_t offset) const {
  Tensor t = Tensor::view(static_cast<char*>(data_) + offset, shape, dtype, device_);
  PRECON_REQUIRE(offset + t.nbytes() <= bytes_, ShapeError, "Buffer::view",
                 "view " + t.describe() + " at offset " + std::to_string(offset) + " exceeds the buffer of " +
                     std::to_string(bytes_) + " bytes");
  return t;
}

}  // namespace precon::kernels
