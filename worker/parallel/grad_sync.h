// Data-parallel gradient averaging, overlapped with the backward pass: the backward reports each
// range of the parameter table whose gradients are final (the model walks its layers from the
// last to the first), ready ranges are packed into buckets of contiguous gradient memory, and
// each full bucket's all-reduce starts at once while earlier layers are still computed.
// finish() waits for every bucket and scales the sums into the mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "worker/model/params.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

class GradientSync {
 public:
  // bucket_bytes: the all-reduce size below which ready ranges wait for their neighbours.
  GradientSync(Communicator& dp, const ParamStore& params, int64_t bucket_bytes = 4 << 20);
  // Parameters [first, end) of the table have their final gradients. Ranges arrive from the end
  // of the table towards its start, each adjacent to the previous one.
  void ready(size_t first, size_t end);
  // Starts what is still unsent, waits for every bucket, multiplies the gradients by `scale`.
  void finish(float scale);
  int64_t bytes_sent() const { return bytes_sent_; }  // all-reduced by this rank since construction
  int buckets() const { return buckets_; }
  double wait_seconds() const { return wait_seconds_; }  // blocked in finish() since construction

 private:
  void launch();

  Communicator& dp_;
  const ParamStore& params_;
  int64_t bucket_bytes_;
  std::vector<int64_t> offset_;  // element offset of each parameter's gradient in the flat buffer
  size_t lo_ = 0, hi_ = 0;       // the pending range [lo_, hi_), empty when lo_ == hi_
  std::vector<std::unique_ptr<PendingCollective>> inflight_;
  int64_t bytes_sent_ = 0;
  int buckets_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace precon::worker
