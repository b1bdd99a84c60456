// What crosses ranks for an optimizer, asked in the optimizer's own terms. An optimizer computes
// the math of one step over the tensors it is given; where that step needs what other ranks hold
// (the owners' results handed to every rank, a tensor-parallel matrix's other parts, a sum over the
// parts of one matrix) it asks a ShareGroup. worker/parallel implements it over the layout's groups
// (worker/parallel/optimizer_groups.h): how bytes move, in which element type (comm_dtype) and
// what they cost lives there; the optimizers name no communicator.
// Thread-compatible: one thread asks (the training thread), every member in the same order.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/tensor.h"

namespace precon::worker {

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

// This rank alone (index 0 of 1): share() copies own to all, sums and maxima are the values given.
// What an optimizer uses when it is given no group.
std::shared_ptr<ShareGroup> solo_group();

}  // namespace precon::worker
