// Who does an expensive per-matrix computation when several ranks hold the same full model:
// every matrix (or Shampoo block) gets one owner, chosen greedily by cost, largest first, each to
// the rank with the least work so far (Megatron's layer-wise distributed optimizer, Distributed
// Shampoo's DDP distributor). Deterministic: every rank computes the same assignment.
#pragma once

#include <cstdint>
#include <vector>

namespace precon::worker::optim {

// owner[i] in [0, ranks) for each cost[i].
std::vector<int> assign_owners(const std::vector<double>& cost, int ranks);

// Newton–Schulz cost of one step on an m × n matrix: max(m, n) · min(m, n)².
double newton_schulz_cost(int64_t m, int64_t n);

}  // namespace precon::worker::optim
