// Data-parallel gradient averaging, overlapped with the backward pass: the backward reports each
// range of the parameter table whose gradients are final (the model walks its layers from the
// last to the first), ready ranges are packed into buckets of contiguous gradient memory, and
// each full bucket's collectives start at once while earlier layers are still computed.
// finish() waits for every bucket and scales the sums into the mean.
//
// A parameter whose gradient one rank alone reads (a Muon matrix: its owner orthogonalises it
// and all-gathers the update) can be given that rank as its root: its sum is then reduced to the
// root instead of all-reduced (Moonlight's Distributed Muon: half the bytes), and the other ranks'
// copies are zeroed, so nothing there reads a gradient that is only their own slice's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "worker/model/params.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

class GradientSync {
 public:
  // roots: per parameter table row, the group rank that alone needs its summed gradient, or -1
  // for every rank; empty: every rank needs every gradient (all-reduce only).
  // bucket_bytes: the size below which ready ranges wait for their neighbours. rows: the table
  // rows this sync sums, scales and counts in norm() (empty: all); expert parallelism sums the
  // routed experts' gradients over another group than the rest, with a second GradientSync.
  GradientSync(Communicator& dp, const ParamStore& params, std::vector<int> roots = {},
               int64_t bucket_bytes = 4 << 20, std::vector<bool> rows = {});
  // Parameters [first, end) of the table have their final gradients. Ranges arrive from the end
  // of the table towards its start, each adjacent to the previous one.
  void ready(size_t first, size_t end);
  // Starts what is still unsent, waits for every bucket, multiplies the gradients by `scale`.
  void finish(float scale);
  // The global norm of the summed gradient after finish(), as one process computes it: each
  // reduced gradient counts on its root, each all-reduced one once; one scalar all-reduce when
  // some gradients were reduced, none otherwise. Under tensor parallelism (`tp` of several ranks)
  // the store holds parts: the split rows' squares are summed over tp, the replicated rows count on
  // its first rank, with one more scalar all-reduce. Every rank must call it.
  double norm(Communicator* tp = nullptr);
  // Its square, known to every rank of the group (the same collectives as norm()).
  double norm_squared(Communicator* tp = nullptr);
  // Bytes this rank sent since construction (comm_cost.h: ring all-reduce, tree reduce).
  int64_t bytes_sent() const { return bytes_sent_; }
  int buckets() const { return buckets_; }
  int reduced_tensors() const;  // parameters routed to a root
  double wait_seconds() const { return wait_seconds_; }  // blocked in the sums since construction

 private:
  void launch();
  int root(size_t i) const { return roots_.empty() ? -1 : roots_[i]; }
  bool mine(size_t i) const { return rows_.empty() || rows_[i]; }

  Communicator& dp_;
  const ParamStore& params_;
  std::vector<int> roots_;
  int64_t bucket_bytes_;
  std::vector<bool> rows_;
  std::vector<int64_t> offset_;  // element offset of each parameter's gradient in the flat buffer
  size_t lo_ = 0, hi_ = 0;       // the pending range [lo_, hi_), empty when lo_ == hi_
  std::vector<std::unique_ptr<PendingCollective>> inflight_;
  std::vector<std::pair<int64_t, int64_t>> foreign_;  // (offset, n) reduced to another rank this step
  int64_t bytes_sent_ = 0;
  int buckets_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace precon::worker
