// How this rank's gradients are made whole, for every layout (issue 35 §3): each rank computes the
// gradient of its own rows (its tensor-parallel parts, its stage's rows, its experts) from its
// slice of the batch; the assembly sums each over the ranks that hold the same part
// (ParallelContext::replicas_of: the data-parallel ranks, or for a routed expert the ranks that hold
// that expert), bucket by bucket while the last backward still runs, scales the sums into the mean
// over the global batch, and sums the tied embedding's between the first and the last stage. The
// step runners hand it the ranges the backward finishes and nothing else: what the layout needs
// is decided here, at construction. A tensor-parallel matrix's whole gradient, which an owner of
// matrix work reads, is assembled here too (WholeGradients, behind OwnedResults::whole_gradient).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/model/model.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/grad_sync.h"
#include "worker/parallel/layout.h"

namespace precon::worker {

class GradientAssembly {
 public:
  // rows: the table rows this rank holds, in table order. roots (expert_roots): per table row, the
  // rank of its replica group that alone reads its summed gradient (-1: every rank) for the rows
  // outside (of) the routed experts; empty: every rank reads every gradient.
  GradientAssembly(const ParallelContext& par, const ParamStore& params, std::vector<size_t> rows,
                   std::vector<int> roots = {}, std::vector<int> expert_roots = {});
  // What a backward whose gradients are final calls for each range of the table it finishes (from
  // the end towards the start; Model::GradsReady): starts their sums. Empty when there is nothing
  // to sum over ranks (one data-parallel rank).
  const Model::GradsReady& ready() const { return ready_; }
  // After the backward passes: sums what is left, waits for every sum, scales the gradients by
  // `scale` (into the mean) and sums the tied embedding's between the first and the last stage.
  void finish(float scale);
  // The global norm of the gradients finish() left, as one process computes it. Every rank calls it.
  double norm();
  // Since construction: seconds blocked waiting for the sums, and the bytes this rank sent into them.
  double wait_seconds() const;
  int64_t bytes_sent() const;
  // What was chosen, for the run's log (empty: nothing to say).
  std::string note() const;

 private:
  void range_ready(size_t first);

  const ParallelContext& par_;
  const ParamStore& params_;
  std::vector<size_t> rows_;
  GradientSync dense_;                    // the rows summed over the data-parallel group
  std::unique_ptr<GradientSync> experts_; // the routed experts', over the ranks that hold each (expert parallelism)
  Model::GradsReady ready_;
  size_t lowest_;              // the start of the last range handed on (params_.size(): none yet)
  int64_t tied_bytes_ = 0;     // the tied embedding's sums
};

// Whole gradients of tensor-parallel matrices, one at a time, for the owners of matrix work
// (Shampoo's and SOAP's blocks, Muon's whole-matrix Newton–Schulz), which read the whole matrix
// while each rank holds a part of it (OwnedResults::whole_gradient). 2-D, CPU fp32 (the trainer's
// tensor parallelism runs on the CPU).
class WholeGradients {
 public:
  // tp: the tensor-parallel group over which the parts lie (null: no matrix is split).
  WholeGradients(std::shared_ptr<ShareGroup> tp, kernels::Device device);
  // p's whole visible gradient: p.grad itself when p is not split, else every rank's part shared
  // over the tensor-parallel group into scratch memory, valid until the next call (every rank of
  // the group asks for the same matrices in the same order).
  kernels::Tensor gather(const OptimParam& p);
  int64_t comm_bytes() const { return comm_bytes_; }

 private:
  std::shared_ptr<ShareGroup> tp_;
  kernels::Device device_;
  kernels::Buffer received_, whole_;
  int64_t comm_bytes_ = 0;
};

// The tied embedding's gradient summed between the first and the last stage (nothing without
// several stages or with an untied head). Returns the bytes this rank sent.
int64_t sum_tied_embedding(const ParallelContext& par, const ParamStore& params);

}  // namespace precon::worker
