#include "kernels/check.h"

namespace precon::kernels {

void shape_error(const char* op, const std::string& message) { PRECON_THROW(ShapeError, op, message); }

Device require_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->data) continue;
    if (!first) {
      first = t;
    } else if (t->device != first->device) {
      shape_error(op, std::string("tensors on different devices: ") + first->describe() + " and " +
                          t->describe());
    }
  }
  return first ? first->device : Device::cpu;
}

void require_dtype(const char* op, const char* what, const Tensor& t, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string names;
  for (DType d : allowed) names += std::string(names.empty() ? "" : " or ") + dtype_name(d);
  PRECON_THROW(UnsupportedError, op,
               std::string(what) + " must be " + names + " on " + device_name(t.device) + ", got " + t.describe());
}

void require_ndim(const char* op, const char* what, const Tensor& t, std::initializer_list<int> allowed) {
  for (int n : allowed)
    if (t.ndim == n) return;
  std::string dims;
  for (int n : allowed) dims += std::string(dims.empty() ? "" : " or ") + std::to_string(n);
  shape_error(op, std::string(what) + " must have " + dims + " dims, got " + t.describe());
}

void require_contiguous(const char* op, const char* what, const Tensor& t) {
  if (!t.contiguous()) shape_error(op, std::string(what) + " must be contiguous, got " + t.describe());
}

void require_numel(const char* op, const char* what, const Tensor& t, int64_t numel) {
  if (t.numel() != numel)
    shape_error(op, std::string(what) + " must have " + std::to_string(numel) + " elements, got " + t.describe());
}

void require_same_shape(const char* op, const char* what, const Tensor& t, const char* ref_what,
                        const Tensor& ref) {
  bool same = t.ndim == ref.ndim;
  for (int d = 0; same && d < t.ndim; ++d) same = t.shape[d] == ref.shape[d];
  if (!same)
    shape_error(op, std::string(what) + " " + t.describe() + " does not match " + ref_what + " " + ref.describe());
}

void require_float(const char* op, const char* what, const Tensor& t) {
  if (t.device == Device::cpu) require_dtype(op, what, t, {DType::f32});
  else require_dtype(op, what, t, {DType::f32, DType::bf16});
}

void require_matrix(const char* op, const char* what, const Tensor& t) {
  if (t.ndim != 2) shape_error(op, std::string(what) + " must be 2-D, got " + t.describe());
  if (t.shape[1] > 1 && t.strides[1] != 1)
    shape_error(op, std::string(what) + " needs unit column stride, got " + t.describe());
  if (t.shape[0] > 1 && t.strides[0] < t.shape[1])
    shape_error(op, std::string(what) + " row stride is smaller than its width: " + t.describe());
}

}  // namespace precon::kernels
