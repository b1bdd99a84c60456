// What crosses ranks for an optimizer, asked in the optimizer's own terms. An optimizer computes
// the math of one step over the tensors it is given; where that step needs what other ranks hold
// (the owners' results handed to every rank, a tensor-parallel matrix's other parts, a sum over the
// parts of one matrix) it asks a ShareGroup. worker/parallel implements it over the layout's groups
// (worker/parallel/optimizer_groups.h): how bytes move, in which element type (comm_dtype) and
// what they cost lives there; the optimizers name no communicator.
// Thread-compatible: one thread asks (the training thread), every member in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace precon::worker {

struct OptimParam;  // optimizer.h

// Values each rank sends per all-gather call of updated parameters (4 MiB of fp32): the receive
// buffer then holds ranks · this many values, not a second copy of every parameter.
constexpr int64_t kGatherChunk = 1 << 20;

// The ranks that hold the same parameters (or the same parts of them), in a fixed order.
class ShareGroup {
 public:
  virtual ~ShareGroup() = default;
  // This rank's place among them, in [0, count()).
  virtual int index() const = 0;
  virtual int count() const = 0;
  // all (count() · n values, in member order) = every member's own (n values): the owners'
  // results handed to every member. `dtype` is what crosses: bf16 rounds every value to bf16 on
  // the way (and back to fp32 in `all`), f32 moves them as they are. own and all lie in `device`'s
  // memory and do not overlap. Returns the bytes this member sent (worker/parallel/comm_cost.h).
  virtual int64_t share(const float* own, float* all, int64_t n, kernels::DType dtype, kernels::Device device) = 0;
  // In place over n values (host memory): the sum over the members, or the largest.
  virtual void sum(float* data, int64_t n) = 0;
  virtual void sum(double* data, int64_t n) = 0;
  virtual void max(int64_t* data, int64_t n) = 0;
};

// One unit of an optimizer's step whose result one place computes for every rank that holds the
// same parameters (a Shampoo block, a SOAP or Muon matrix): what computing it costs, and the values
// of its result's parts. One part: the unit is computed whole, by one rank. Several: one per
// tensor-parallel rank (OptimizerHooks::tensor), part r computed by tensor rank r of one data index
// (Muon's tp_mode distributed and blockwise).
struct OwnedUnit {
  double cost = 0;
  std::vector<int64_t> parts;
};

// Who computes each unit of a step and how the results reach every rank, fixed when it is made
// (OwnerPlanner): worker/parallel assigns the owners and moves the results (distributed_optimizer.h),
// so an optimizer computes the units it is told are its own into the memory it is given and applies
// every result as it arrives. Every rank makes the same units and calls share() alike.
class OwnedResults {
 public:
  virtual ~OwnedResults() = default;
  // Whether this rank computes unit u (whole, or its part of it: part()).
  virtual bool mine(size_t unit) const = 0;
  // The part of unit u that this rank computes when it is computed in parts (this rank's tensor
  // rank), else 0.
  virtual size_t part(size_t unit) const = 0;
  // Whether this rank holds state for unit u: it computes it, or its data index computes it in parts.
  // The same as mine() for a unit of one part.
  virtual bool holds(size_t unit) const = 0;
  // Whether this rank's data index computes unit u (its tensor-parallel group then gathers a split
  // matrix's whole gradient for it).
  virtual bool ours(size_t unit) const = 0;
  // Whether this rank applies part p of unit u's result itself (a part computed by its own tensor
  // rank, or the single part of a unit, which every rank applies to what it holds).
  virtual bool applies(size_t unit, size_t part) const = 0;
  // The data index (of OptimizerHooks::replica_group) whose ranks compute unit u: the only one that
  // needs its gradient.
  virtual int root(size_t unit) const = 0;
  // The rank (of OptimizerHooks::group) that computes a unit of one part, for messages.
  virtual int owner(size_t unit) const = 0;
  // Memory for this rank's result of unit u (its part; mine(u)): parts[part(u)] values, contiguous.
  virtual float* own(size_t unit) = 0;
  // Hands every result to every rank, in chunks of at most the chunk asked for, and for each
  // unit's part with values in a chunk (unit order, then part order) calls arrived(unit, part,
  // first, n, values): its values [first, first + n), valid during the call. Seconds spent moving
  // the values are added to gather_seconds, in the calls to arrived to apply_seconds.
  using Arrived = std::function<void(size_t unit, size_t part, int64_t first, int64_t n, const float* values)>;
  virtual void share(const Arrived& arrived, double& gather_seconds, double& apply_seconds) = 0;
  // In place over n flags, one per unit (host memory): the largest over the ranks, so that every
  // rank learns what each owner reports (Shampoo's failed refreshes).
  virtual void max(int64_t* flags, int64_t n) = 0;
  // The whole visible gradient of p, a matrix whose units this rank or its data index computes:
  // p.grad itself when p is not split, else every tensor-parallel rank's part assembled into
  // scratch memory (worker/parallel's gradient assembly), valid until the next call. Every rank of
  // the tensor-parallel group asks for the same matrices in the same order.
  virtual kernels::Tensor whole_gradient(const OptimParam& p) = 0;
  // Bytes this rank sent in share() and whole_gradient() (worker/parallel/comm_cost.h).
  virtual int64_t comm_bytes() const = 0;
  // Whether this rank writes state that every data index holds alike to checkpoints (data index 0).
  virtual bool primary() const = 0;
  // Whether several ranks take part, and this rank's words for the start-up log ("rank 3").
  virtual bool distributed() const = 0;
  virtual std::string who() const = 0;
};

// Makes an optimizer's OwnedResults: its units, the element type that crosses (comm_dtype), the
// most values a rank sends per all-gather (0: the whole segment at once) and where the results live.
using OwnerPlanner = std::function<std::unique_ptr<OwnedResults>(const std::vector<OwnedUnit>& units, kernels::DType dtype,
                                                                 int64_t chunk, kernels::Device device)>;

// The element-wise state of `total` values (an AdamW group's parameters back to back, in order)
// divided over the ranks that hold the same values (parallel.distributed_optimizer): each rank
// updates its own contiguous range, and share() hands every rank's updated values to all. The
// ranges and the all-gather are worker/parallel's (distributed_optimizer.h range_planner).
class OwnedRanges {
 public:
  virtual ~OwnedRanges() = default;
  // This rank's values [lo(), hi()).
  virtual int64_t lo() const = 0;
  virtual int64_t hi() const = 0;
  // The rank (of the group) whose range holds values [first, first + n), or -1 when they span ranges.
  virtual int root(int64_t first, int64_t n) const = 0;
  // After the update: copy(from, to, buf, into_buf) moves values [from, to) between the parameters
  // and contiguous memory (into_buf: parameters to buf); share() packs this rank's values with it,
  // all-gathers them and unpacks every other rank's, in chunks.
  using Copy = std::function<void(int64_t from, int64_t to, float* buf, bool into_buf)>;
  virtual void share(const Copy& copy) = 0;
  // Bytes this rank sent in share() (worker/parallel/comm_cost.h).
  virtual int64_t comm_bytes() const = 0;
};

// Makes the ranges of `total` values (values that live in `device`'s memory); null: every rank
// updates every value.
using RangePlanner = std::function<std::unique_ptr<OwnedRanges>(int64_t total, kernels::Device device)>;

// This rank alone computes every unit (each of one part) and applies its own results; what an
// optimizer uses when it is given no planner.
std::unique_ptr<OwnedResults> solo_results(const std::vector<OwnedUnit>& units, kernels::Device device);

// This rank alone (index 0 of 1): share() copies own to all, sums and maxima are the values given.
// What an optimizer uses when it is given no group.
std::shared_ptr<ShareGroup> solo_group();

}  // namespace precon::worker
