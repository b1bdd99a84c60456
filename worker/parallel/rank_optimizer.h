// The optimizer of what this rank holds (issue 35 §3): one single-process optimizer per set of
// rows held by the same ranks, each made with the distributed optimizer's planners over those
// ranks (distributed_optimizer.h: owners of the per-matrix work, the element-wise state's ranges).
// The stage's rows are held by its tensor × data ranks; under expert parallelism the routed experts
// by the ranks of one expert-parallel rank (ParallelContext::expert_stage). Every layout uses the
// same wrapper: expert parallelism is a part over the expert groups, pipeline parallelism a part
// whose counters are merged with the other stages'.
// Checkpoints: each rank lists the state it holds under the names one process gives it; the
// counters (state_scalars) of the rows other ranks hold are gathered from them before a checkpoint,
// so a resume at any layout loads them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/optim/optimizer.h"
#include "worker/parallel/layout.h"

namespace precon::worker {

class RankOptimizer final : public Optimizer {
 public:
  // One optimizer over some of this rank's rows.
  struct Part {
    std::unique_ptr<Optimizer> optimizer;
    std::vector<size_t> rows;  // the table rows it steps, in the order it was given them
    // The ranks that hold the other rows of this kind, each set with an optimizer like this one
    // (the expert-parallel ranks' experts, the other stages): `speakers` names, per set, the rank of
    // `peers` whose counters count, `own` this rank's set. Null peers: no other rows of this kind.
    // The optimizer may be a RankOptimizer itself (a stage's), gathered first.
    Communicator* peers = nullptr;
    std::vector<int> speakers;
    size_t own = 0;
    // Whether this part's holders load the whole run's counters (the top-level numbers of the
    // scalars); the others load their per-unit entries only, so that each counter is loaded once.
    bool takes_counters = true;
    // A parameter whose state another holder writes to checkpoints (the last stage's copy of the
    // tied embedding); empty: none.
    std::string not_primary;
    // Words before its routing summary ("this rank's routed experts"); empty for the first part.
    std::string label;
  };
  explicit RankOptimizer(std::vector<Part> parts);

  void step(const StepContext& ctx) override;
  std::vector<NamedState> state_tensors() override;
  std::vector<StateKind> state_kinds() const override;
  // Every part's scalars merged key by key (numbers summed), a part with peers merged with its
  // peers' as of the last gather().
  nlohmann::json state_scalars() const override;
  void load_state_scalars(const nlohmann::json& scalars) override;
  PhaseSeconds phase_seconds() const override;
  int64_t inverse_root_failures() const override;
  int64_t comm_bytes() const override;
  std::string routing_summary() const override;

  // Per table row of a store of `rows` rows: the rank (of the part's replica group) that alone reads
  // the gradient of a row part `part` steps, -1 for every rank and for the rows of other parts;
  // empty when no row of the part has a root.
  std::vector<int> roots_by_row(size_t part, size_t rows) const;
  size_t parts() const { return parts_.size(); }

  // Collective over every part's peers (inner RankOptimizers first): their counters to every rank.
  void gather();

 private:
  struct Held {
    Part part;
    std::vector<nlohmann::json> gathered;  // each speaker's scalars, as of the last gather()
  };
  std::vector<Held> parts_;
};

// This rank's optimizer for its rows of `store` (`rows`, in table order): the rows the stage's
// tensor × data ranks hold over the stage group (part 0), the routed experts under expert
// parallelism over the expert group (part 1); under pipeline parallelism those in one part of a
// RankOptimizer whose counters are merged over the stages.
// `distribute_elementwise`: parallel.distributed_optimizer.
std::unique_ptr<RankOptimizer> make_rank_optimizer(const OptimizerConfig& config, const ParallelContext& par,
                                                   const ParamStore& store, const std::vector<size_t>& rows,
                                                   kernels::Device device, bool distribute_elementwise,
                                                   std::function<void(const std::string&)> warn);

// Optimizer scalars (state_scalars) of several holders: objects merged key by key (recursively),
// numbers summed; and the part of `saved` that `mine` (a holder's own scalars) has keys for, its
// top-level numbers (the whole run's counters) zeroed unless `counters`.
void merge_scalars(nlohmann::json& into, const nlohmann::json& from);
nlohmann::json scalars_for(const nlohmann::json& saved, const nlohmann::json& mine, bool counters);
// Collective over `group`: `value` from its rank `root` to every rank.
void broadcast_json(Communicator& group, nlohmann::json& value, int root);

}  // namespace precon::worker
