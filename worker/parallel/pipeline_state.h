// Pipeline parallelism's parameters, gradients and optimizer state. A rank holds its own stage's
// parameters, gradients and optimizer state only (memory divided by the stages), or with
// interleaving its chunks', in one store; it computes and steps them. The tied embedding lives on
// the first and the last rank: both step it with the same summed gradient, as Megatron does. For a checkpoint the first rank gathers the
// whole model from the stages' leaders into host memory and writes the layout-free
// model.safetensors; each rank writes the optimizer state it owns, under the names one process
// gives it, so a resume at any layout loads it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/optim/optimizer.h"
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

// Optimizer scalars (state_scalars) of several parts of a model: objects merged key by key
// (recursively), numbers summed; and the part of `saved` that `mine` (a part's own scalars) has
// keys for, with numbers zeroed unless `counters` (one part takes the counters).
void merge_scalars(nlohmann::json& into, const nlohmann::json& from);
nlohmann::json scalars_for(const nlohmann::json& saved, const nlohmann::json& mine, bool counters);
// Collective over `group`: `value` from its rank `root` to every rank.
void broadcast_json(Communicator& group, nlohmann::json& value, int root);

// This rank's stage's optimizer, with the counters of the others for checkpoints. The state lists
// the own stage's tensors with the names a single-process optimizer gives; on the last stage the
// tied embedding's are not primary (the first stage writes them; a resume loads both by name).
class StageOptimizers final : public Optimizer {
 public:
  StageOptimizers(std::unique_ptr<Optimizer> own, int own_stage, int stages, std::string tied_name);
  void step(const StepContext& ctx) override { own_->step(ctx); }
  std::vector<NamedState> state_tensors() override;
  std::vector<StateKind> state_kinds() const override { return own_->state_kinds(); }
  // Every stage's (after gather()) merged key by key, counters summed; loading hands the own
  // stage the keys it has (the counters to the first stage).
  nlohmann::json state_scalars() const override;
  void load_state_scalars(const nlohmann::json& scalars) override;
  PhaseSeconds phase_seconds() const override { return own_->phase_seconds(); }
  int64_t inverse_root_failures() const override { return own_->inverse_root_failures(); }
  int64_t comm_bytes() const override { return own_->comm_bytes(); }
  std::string routing_summary() const override { return own_->routing_summary(); }

  // Collective over the world: every stage's optimizer counters from its leader to every rank
  // (the state tensors are written to checkpoints by the ranks that hold them).
  void gather(Communicator& world, const ParallelContext& par);

 private:
  std::unique_ptr<Optimizer> own_;
  int own_stage_, stages_;
  std::string tied_name_;                 // the tied embedding's parameter name
  std::vector<nlohmann::json> scalars_;   // each stage's counters, as of the last gather()
};

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

// After the schedule: sums the gradients of this rank's rows (pipeline_rank_rows) over its stage's
// tensor- and data-parallel ranks, scales them by `scale`, and sums the tied embedding's between
// the first and the last stage. Returns the bytes this rank all-reduced.
int64_t sum_stage_gradients(const ParallelContext& par, const ParamStore& params, const std::vector<size_t>& rows,
                            float scale);
// Only the last part of that: the tied embedding's sum between the first and the last stage (for
// a stage whose own sums ran bucket by bucket during its last backward). Returns the bytes.
int64_t sum_tied_embedding(const ParallelContext& par, const ParamStore& params);

// The global gradient norm: the squared norm of this rank's rows (the tied embedding counted
// once, on the first stage) summed over the stages.
double pipeline_grad_norm(const ParallelContext& par, const ParamStore& params, const std::vector<size_t>& rows);

}  // namespace precon::worker
