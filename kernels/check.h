// Argument checks shared by the op front-ends. Each throws a typed error naming the op and
// describing the tensors involved.
#pragma once

#include <initializer_list>
#include <string>

#include "kernels/error.h"
#include "kernels/tensor.h"

namespace precon::kernels {

// All non-empty tensors live on one device; returns it.
Device require_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
void require_dtype(const char* op, const char* what, const Tensor& t, std::initializer_list<DType> allowed);
// f32 on the CPU; f32 or bf16 on a GPU.
void require_float(const char* op, const char* what, const Tensor& t);
void require_ndim(const char* op, const char* what, const Tensor& t, std::initializer_list<int> allowed);
void require_contiguous(const char* op, const char* what, const Tensor& t);
void require_numel(const char* op, const char* what, const Tensor& t, int64_t numel);
// Same shape as the reference tensor.
void require_same_shape(const char* op, const char* what, const Tensor& t, const char* ref_what,
                        const Tensor& ref);
// A 2-D view usable as a BLAS matrix: unit column stride, row stride >= cols.
void require_matrix(const char* op, const char* what, const Tensor& t);
[[noreturn]] void shape_error(const char* op, const std::string& message);

}  // namespace precon::kernels
