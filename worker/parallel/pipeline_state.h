// Pipeline parallelism's parameters and gradients. A rank holds its own stage's parameters,
// gradients and optimizer state only (memory divided by the stages), or with interleaving its
// chunks', in one store; it computes and steps them (its optimizer: rank_optimizer.h). The tied
// embedding lives on the first and the last rank: both step it with the same summed gradient, as
// Megatron does. For a checkpoint the first rank gathers the whole model from the ranks that hold
// each row and writes the layout-free model.safetensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/parallel/layout.h"

namespace precon::worker {

// The model chunks of pipeline rank p under the context's layout, in virtual-stage order: virtual
// stage v·pipeline + p for v in [0, virtual_stages) (one chunk without interleaving), each with the
// activation slots the schedule needs for `micro_batches`.
std::vector<ModelStage> pipeline_chunks(const ParallelContext& par, int p, int64_t micro_batches);
// The parameter table rows pipeline rank p holds: its chunks' rows, in table order (of the routed
// experts, this rank's expert-parallel rank's only).
std::vector<size_t> pipeline_rank_rows(const ParallelContext& par, const std::vector<ParamSpec>& table, int p);
// "blocks 0 to 1" for one chunk, "blocks 0 to 0, 2 to 2" for several (for the layout's log line).
std::string pipeline_blocks_text(const std::vector<ModelStage>& chunks);

// The whole model for model.safetensors, one tensor at a time: the first rank asks for each row
// in table order (fetch) while every other rank sends, in the same order, the rows and
// tensor-parallel parts it is the source of (send_rows): a row from the first stage that holds it
// (a routed expert from the rank of that stage that holds it), each part from its tensor-parallel
// rank. Only the tensor being written exists whole, on the first rank.
class ModelGather {
 public:
  ModelGather(Communicator& world, const ParallelContext& par, const ParamStore& params);
  // First rank: row's whole tensor (storage_numel floats) into `whole`.
  void fetch(size_t row, std::vector<float>& whole);
  // Every other rank: its rows, in table order.
  void send_rows();

 private:
  int parts(size_t row) const;
  Communicator& world_;
  const ParallelContext& par_;
  const ParamStore& params_;
  std::vector<int> from_;    // each row's source stage
  std::vector<float> part_;  // one part as it arrives
};

}  // namespace precon::worker
