#include "worker/optim/ownership.h"

#include <algorithm>
#include <numeric>

namespace precon::worker::optim {

std::vector<int> assign_owners(const std::vector<double>& cost, int ranks) {
  std::vector<size_t> order(cost.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Largest first; equal costs keep table order, so the result does not depend on the sort.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<size_t>(std::max(ranks, 1)), 0.0);
  std::vector<int> owner(cost.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    owner[i] = static_cast<int>(least - load.begin());
    *least += cost[i];
  }
  return owner;
}

double newton_schulz_cost(int64_t m, int64_t n) {
  const double lo = static_cast<double>(std::min(m, n)), hi = static_cast<double>(std::max(m, n));
  return hi * lo * lo;
}

}  // namespace precon::worker::optim
