// The CUDA backend: cuBLAS/cuBLASLt, cuSOLVER and our kernels, built into the plugin
// libprecon_cuda.so (kernels/cuda/plugin.cpp hands these functions to the dispatch point). A
// plain C++ header (no CUDA includes).
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "kernels/tensor.h"

namespace precon::kernels::cuda {
#include "kernels/backend_ops.inc"

int device_count();  // 0 when no driver or no GPU; never throws
void select_device(int local_rank);  // GPU (local_rank mod visible GPUs) becomes current; none: no-op
void memory_info(size_t* free_bytes, size_t* total_bytes);  // the current GPU's free and total memory
}  // namespace precon::kernels::cuda
