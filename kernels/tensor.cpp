#include "kernels/tensor.h"

#include "kernels/error.h"

namespace precon::kernels {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

size_t dtype_size(DType dtype) { return dtype == DType::bf16 ? 2 : 4; }

Tensor Tensor::view(void* data, std::initializer_list<int64_t> shape, DType dtype, Device device) {
  PRECON_REQUIRE(shape.size() <= kMaxDims, ShapeError, "Tensor::view", "at most 4 dimensions");
  Tensor t;
  t.data = data;
  t.ndim = static_cast<int>(shape.size());
  t.dtype = dtype;
  t.device = device;
  int i = 0;
  for (int64_t s : shape) {
    PRECON_REQUIRE(s >= 0, ShapeError, "Tensor::view", "negative dimension");
    t.shape[i++] = s;
  }
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int64_t Tensor::numel() const {
  if (ndim == 0) return data ? 1 : 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

int64_t Tensor::size(int dim) const {
  int d = dim < 0 ? ndim + dim : dim;
  PRECON_REQUIRE(d >= 0 && d < ndim, ShapeError, "Tensor::size",
                 "dimension " + std::to_string(dim) + " out of range for " + describe());
  return shape[d];
}

bool Tensor::contiguous() const {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != stride) return false;
    stride *= shape[d];
  }
  return true;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape) const {
  PRECON_REQUIRE(contiguous(), ShapeError, "Tensor::reshape", "needs a contiguous tensor, got " + describe());
  Tensor t = view(data, new_shape, dtype, device);
  PRECON_REQUIRE(t.numel() == numel(), ShapeError, "Tensor::reshape",
                 "cannot reshape " + describe() + " to " + t.describe());
  return t;
}

Tensor Tensor::select(int64_t index) const {
  PRECON_REQUIRE(ndim >= 1 && index >= 0 && index < shape[0], ShapeError, "Tensor::select",
                 "index " + std::to_string(index) + " out of range for " + describe());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + index * strides[0] * static_cast<int64_t>(dtype_size(dtype));
  for (int d = 1; d < ndim; ++d) {
    t.shape[d - 1] = shape[d];
    t.strides[d - 1] = strides[d];
  }
  t.shape[ndim - 1] = 0;
  t.strides[ndim - 1] = 0;
  t.ndim = ndim - 1;
  return t;
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  int d = dim < 0 ? ndim + dim : dim;
  PRECON_REQUIRE(d >= 0 && d < ndim && start >= 0 && length >= 0 && start + length <= shape[d], ShapeError,
                 "Tensor::narrow", "range out of bounds for " + describe());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + start * strides[d] * static_cast<int64_t>(dtype_size(dtype));
  t.shape[d] = length;
  return t;
}

Tensor Tensor::transposed() const {
  PRECON_REQUIRE(ndim >= 2, ShapeError, "Tensor::transposed", "needs >= 2 dims, got " + describe());
  Tensor t = *this;
  std::swap(t.shape[ndim - 1], t.shape[ndim - 2]);
  std::swap(t.strides[ndim - 1], t.strides[ndim - 2]);
  return t;
}

float* Tensor::f32() const {
  PRECON_REQUIRE(dtype == DType::f32, ShapeError, "Tensor::f32", "tensor is " + describe());
  return static_cast<float*>(data);
}

bf16* Tensor::b16() const {
  PRECON_REQUIRE(dtype == DType::bf16, ShapeError, "Tensor::b16", "tensor is " + describe());
  return static_cast<bf16*>(data);
}

int32_t* Tensor::i32() const {
  PRECON_REQUIRE(dtype == DType::i32, ShapeError, "Tensor::i32", "tensor is " + describe());
  return static_cast<int32_t*>(data);
}

std::string Tensor::describe() const {
  std::string s = dtype_name(dtype);
  s += "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ",";
    s += std::to_string(shape[d]);
  }
  s += "]@";
  s += device_name(device);
  if (!contiguous()) s += "(strided)";
  return s;
}

}  // namespace precon::kernels
