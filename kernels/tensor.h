// A small non-owning tensor view: pointer, shape, strides, dtype, device.
// Memory is owned elsewhere (one allocation per purpose, carved into named views).
// Thread-safety: a Tensor is a plain value; concurrent writes to the memory it views
// are the caller's business.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

namespace precon::kernels {

enum class DType : uint8_t { f32, bf16, i32 };
enum class Device : uint8_t { cpu, cuda };

constexpr int kMaxDims = 4;

const char* dtype_name(DType dtype);
const char* device_name(Device device);
size_t dtype_size(DType dtype);

// bfloat16 storage type; arithmetic happens in fp32.
struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, NaN stays NaN.
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

struct Tensor {
  void* data = nullptr;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements
  int ndim = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu;

  // A contiguous row-major view.
  static Tensor view(void* data, std::initializer_list<int64_t> shape, DType dtype = DType::f32,
                     Device device = Device::cpu);

  int64_t numel() const;
  int64_t size(int dim) const;  // negative dims count from the end
  bool contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  // Views of the same memory.
  Tensor reshape(std::initializer_list<int64_t> new_shape) const;  // requires contiguous
  Tensor select(int64_t index) const;                              // drop the leading dim
  Tensor narrow(int dim, int64_t start, int64_t length) const;     // strided sub-range
  Tensor transposed() const;                                       // swap the last two dims

  float* f32() const;
  bf16* b16() const;
  int32_t* i32() const;

  std::string describe() const;  // "f32[7,13]@cpu"
};

}  // namespace precon::kernels
