// Same-shape Newton–Schulz problems orthogonalised as one batched call: a MoE layer's routed
// experts are many small matrices of one shape each (gate and up, down), and one call per matrix
// leaves a CPU's cores or a GPU mostly idle on them. kernels::newton_schulz takes (batch, rows,
// cols) and orthogonalises each matrix as it would alone.
// A caller registers the problems it will orthogonalise (an id and a shape); each shape with two
// or more problems is a group, when two of them fit kNsBatchFloats (large matrices gain nothing
// from a batch and would cost a copy of each). Each step it writes a problem's direction into
// slot(id) and calls filled(id); once a group's slots are full (at most kMaxNsBatch matrices and
// kNsBatchFloats values at a time) or at the group's last problem, the batch is orthogonalised in
// place and done(id, result) is called for each of them.
// Thread-safety: one instance per optimizer, used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/newton_schulz.h"

namespace precon::worker::optim {

// The most problems one call orthogonalises, and the most values a group's slots hold (16 MiB).
constexpr int64_t kMaxNsBatch = 64;
constexpr int64_t kNsBatchFloats = int64_t{1} << 22;

class NsBatches {
 public:
  using Done = std::function<void(size_t id, const kernels::Tensor& result)>;

  // Registers problem `id` (ids distinct, in the order the step fills them) of shape (rows, cols).
  void add(size_t id, int64_t rows, int64_t cols);
  // Groups the problems by shape and allocates the slots of the groups of two or more.
  void allocate(kernels::Device device);
  // True when problem id is orthogonalised in a batch (its shape is shared).
  bool batched(size_t id) const { return where_.count(id) != 0; }
  // Starts a step: a step cut short by an error leaves no batch half filled.
  void begin_step();
  // Where the direction of batched problem id goes this step: (rows, cols), contiguous.
  kernels::Tensor slot(size_t id) const;
  // Problem id's slot is written: runs its group's batch when that is full or id is the group's
  // last, then calls done for each problem of the batch with its result (valid until the next call).
  void filled(size_t id, const kernels::NsOptions& options, const Done& done);
  // Every batched problem's count, for the start-up log: (problems batched, groups).
  std::pair<size_t, size_t> counts() const;

 private:
  struct Group {
    int64_t rows = 0, cols = 0;
    std::vector<size_t> ids;  // in fill order
    size_t offset = 0;        // of its slots in buffer_, in floats
    int64_t capacity = 0;     // problems per batch
    int64_t pending = 0;      // slots written since the last batch ran
  };
  std::vector<Group> groups_;
  std::map<size_t, std::pair<size_t, size_t>> where_;  // id -> (group, index in the group)
  std::vector<std::pair<size_t, std::pair<int64_t, int64_t>>> added_;
  kernels::Buffer buffer_;
  kernels::Device device_ = kernels::Device::cpu;
};

}  // namespace precon::worker::optim
