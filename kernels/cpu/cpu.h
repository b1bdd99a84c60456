// The CPU backend: OpenBLAS, LAPACKE and OpenMP loops.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "kernels/tensor.h"

namespace precon::kernels::cpu {
#include "kernels/backend_ops.inc"

void set_threads(int threads);
}  // namespace precon::kernels::cpu
