// The CUDA backend: cuBLAS/cuBLASLt, cuSOLVER and our kernels. A plain C++ header (no CUDA
// includes) so the dispatch point can call it from host code.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "kernels/tensor.h"

namespace precon::kernels::cuda {
#include "kernels/backend_ops.inc"

int device_count();  // 0 when no driver or no GPU; never throws
}  // namespace precon::kernels::cuda
