// The distributed optimizer around the single-process ones: which rank computes each unit of a
// step (a Shampoo block, a SOAP or Muon matrix, or a tensor-parallel part of one) and how the
// results reach every rank that holds the same parameters (issue 35 §3). An optimizer describes
// its units (worker/optim/exchange.h OwnedUnit: cost, result sizes); the planner made here assigns
// the owners over the group's ranks, gives each rank memory for its own results and all-gathers
// them (in optimizer.*.comm_dtype) after the rank has computed them, handing every result to the
// optimizer to apply. The groups' order (member = data index · tensor + tensor rank) is the
// layout's (layout.h group_member).
#pragma once

#include <memory>
#include <vector>

#include "worker/optim/exchange.h"

namespace precon::worker {

// owner[i] in [0, ranks) for each cost[i]: greedily by cost, largest first, each to the rank with
// the least work so far (the layer-wise distributed optimizer's rule). Deterministic: every rank
// computes the same assignment.
std::vector<int> assign_owners(const std::vector<double>& cost, int ranks);

// OptimizerHooks::owners over `group` (group index = data index · tensor + tensor rank; `tp`, this
// rank's tensor-parallel group, is checked against it when tensor > 1, and assembles a split
// matrix's whole gradient for its owners: OwnedResults::whole_gradient). A unit of one part goes
// to a rank of the group; a unit of `tensor` parts to a data index, part r to its tensor rank r.
// Both assignments are made over every unit's cost. Null when group is null; OptimizerError when
// the groups do not have that shape.
OwnerPlanner owner_planner(std::shared_ptr<ShareGroup> group, int tensor, std::shared_ptr<ShareGroup> tp);
// The same with a tp the caller keeps alive as long as the optimizers it plans.
OwnerPlanner owner_planner(std::shared_ptr<ShareGroup> group, int tensor, ShareGroup* tp = nullptr);

// OptimizerHooks::ranges over `replicas` (the ranks that hold the same values): `total` values cut
// into contiguous ranges of ceil(total / ranks), range r to group rank r, the updated values
// all-gathered in chunks of at most kGatherChunk a rank. Null when replicas is null or one rank.
RangePlanner range_planner(std::shared_ptr<ShareGroup> replicas);

}  // namespace precon::worker
