// Scratch memory reused across calls on the calling thread, so iterative ops (Newton–Schulz,
// inverse roots) allocate once and not per call. Thread-safety: per thread; a view is valid
// until the next scratch() call with the same device and slot on this thread.
#pragma once

#include <initializer_list>

#include "kernels/tensor.h"

namespace precon::kernels {

constexpr int kScratchSlots = 12;

Tensor scratch(Device device, int slot, std::initializer_list<int64_t> shape, DType dtype = DType::f32);

}  // namespace precon::kernels
