#include "worker/optim/work_cost.h"

#include <algorithm>

namespace precon::worker::optim {

double newton_schulz_cost(int64_t m, int64_t n) {
  const double lo = static_cast<double>(std::min(m, n)), hi = static_cast<double>(std::max(m, n));
  return hi * lo * lo;
}

}  // namespace precon::worker::optim
