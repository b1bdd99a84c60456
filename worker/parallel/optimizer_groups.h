// The optimizers' exchanges (worker/optim/exchange.h) over this layout's groups: an optimizer asks
// a ShareGroup for the owners' results, a matrix's other parts or a sum over the parts, and this
// moves them over a Communicator, in the element type asked for (optimizer.*.comm_dtype: bf16 is
// cast here, on either side of the bytes' all-gather), counting what this rank sends (comm_cost.h).
// The groups are the ones OptimizerHooks names: the stage's tensor × data ranks, their
// tensor-parallel ranks, the data-parallel ranks that hold the same parts (or an expert's).
#pragma once

#include <memory>

#include "worker/optim/exchange.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// The ranks of `group` as a ShareGroup (member index = group rank); `group` must outlive it.
// Null when group is null.
std::shared_ptr<ShareGroup> share_group(Communicator* group);

}  // namespace precon::worker
