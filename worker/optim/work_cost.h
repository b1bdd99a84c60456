// What a unit of an optimizer's step costs, for worker/parallel's owner assignment
// (distributed_optimizer.h: the most expensive units first, each to the least loaded rank).
#pragma once

#include <cstdint>

namespace precon::worker::optim {

// Newton–Schulz cost of one step on an m × n matrix: max(m, n) · min(m, n)².
double newton_schulz_cost(int64_t m, int64_t n);

}  // namespace precon::worker::optim
