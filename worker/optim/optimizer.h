// Optimizers built from config through a name -> factory registry. A run's optimizer owns every
// parameter: parameter-group rules route 2-D hidden matrices to Muon/Shampoo and embeddings,
// positions, norms and biases to AdamW (with [optimizer.adamw]'s lr/betas/wd).
// Thread-safety: one optimizer per trainer thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/tensor.h"
#include "worker/common/error.h"
#include "worker/config/config.h"
#include "worker/model/params.h"
#include "worker/optim/exchange.h"

namespace precon::worker {

// A parameter as the optimizer sees it: its table row (the whole tensor's spec) and the storage
// views of value and gradient. Under tensor parallelism (tp of several ranks) a row with a
// tp_split_dim is held as this rank's part only (params.h tp_part_spec): param and grad are the
// part's; a replicated row is whole on every rank of the group.
struct OptimParam {
  const ParamSpec* spec = nullptr;
  kernels::Tensor param;
  kernels::Tensor grad;
  TpPlace tp;
  bool split() const { return tp.size > 1 && spec->tp_split_dim >= 0; }
};

// Cumulative wall-clock seconds per optimizer phase since construction (or the last reset).
struct PhaseSeconds {
  double newton_schulz = 0;  // Muon: orthogonalisation
  double statistics = 0;     // Shampoo, SOAP: L/R factor updates
  double inverse_root = 0;   // Shampoo: inverse-root refreshes
  double grafting = 0;       // Shampoo: grafting state and norms
  double eigenbasis = 0;     // SOAP: eigendecompositions, power steps and QRs of the factors' bases
  double adamw = 0;          // AdamW-routed parameters (and adamw runs)
  double other = 0;          // momentum, weight decay, applying updates
  double communication = 0;  // sharing the owners' results with the other ranks
  double total() const { return newton_schulz + statistics + inverse_root + grafting + eigenbasis + adamw + other + communication; }
};

struct StepContext {
  int64_t step = 1;          // 1-based optimizer step (bias corrections, refresh schedule)
  double lr_scale = 1.0;     // schedule multiplier applied to every group's base lr
  float grad_scale = 1.0f;   // multiplies raw gradients first (global-norm clipping)
};

// A named view of one optimizer state tensor (fp32). A checkpoint saves these; a resume copies
// saved values into them. Names: "<param>.<kind>", or "<param>.block<i>.<kind>" for Shampoo's
// per-block state, e.g. "h.0.mlp.c_fc.weight.momentum", "h.0.attn.c_attn.weight.block2.L".
// With several ranks each rank lists only the state it holds: the expensive state lives with the
// owner of its matrix or block (OptimizerHooks::owners); `primary` says which holder writes it to a
// checkpoint, so each entry is written once. A rank may hold only a part of a tensor (Muon's
// momentum under tp_mode = distributed: its tensor-parallel part): then `tensor` is that part,
// a box at `global_offset` in a tensor of `global_shape`, and one tensor may be listed as several
// parts (one per Q/K/V chunk). A resume reads whatever parts the checkpoint holds into the parts
// it holds now, so the layout may change.
struct NamedState {
  std::string name;
  kernels::Tensor tensor;  // the part this rank holds (2-D parts may be strided views: unit column stride)
  std::vector<int64_t> global_shape;   // the whole tensor's shape; empty: tensor is the whole tensor
  std::vector<int64_t> global_offset;  // the part's first index per dim; empty: zeros
  std::string param;       // the parameter table row it belongs to
  int block = -1;          // Shampoo block index (row-major over the parameter); -1 = the whole parameter
  std::string kind;        // the allocation it lives in: "exp_avg", "exp_avg_sq", "momentum", "L", ...
  int64_t offset = 0;      // its first element within that allocation (elements, not bytes)
  bool primary = true;     // this rank writes it (false on the other holders of a replicated entry)
};

// One kind of state in one allocation, holding every tensor of that kind back to back as one
// contiguous range each, parameters in table order (and blocks in order within a parameter): a
// data-parallel part of a kind is an offset range, and (name, shape, offset) locate a tensor.
struct StateKind {
  std::string kind;
  kernels::Tensor flat;  // 1-D f32 over the whole allocation
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(const StepContext& ctx) = 0;
  virtual std::vector<NamedState> state_tensors() = 0;  // grouped by kind, each kind in offset order
  virtual std::vector<StateKind> state_kinds() const = 0;
  // Non-tensor state (counters such as consecutive root failures), for trainer.json.
  virtual nlohmann::json state_scalars() const = 0;
  virtual void load_state_scalars(const nlohmann::json& scalars) = 0;
  virtual PhaseSeconds phase_seconds() const = 0;
  // Inverse-root computations that failed (keeping the previous root) over the whole run, resumes
  // included; 0 for optimizers without inverse roots. Reported as inverse_root_failures.
  virtual int64_t inverse_root_failures() const { return 0; }
  // Bytes this rank sent in the optimizer's own collectives since construction, counted as
  // GradientSync::bytes_sent counts the gradient's (worker/parallel/comm_cost.h).
  virtual int64_t comm_bytes() const { return 0; }
  // Per parameter given to the factory, in that order: the rank of OptimizerHooks::replica_group()
  // that alone reads its gradient, or -1 when every rank does. The trainer may then reduce that
  // gradient to its root only (GradientSync); the other ranks find zeros there. Empty: every rank
  // reads every gradient.
  virtual std::vector<int> gradient_roots() const { return {}; }
  // One line per group: how many tensors and parameters go to each optimizer.
  virtual std::string routing_summary() const = 0;
};

// Thrown when the optimizer cannot continue (e.g. too many consecutive inverse-root failures).
class OptimizerError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

struct OptimizerHooks {
  std::function<void(const std::string&)> warn;  // logged warnings (failed roots); may be empty
  // The groups are worker/parallel's (optimizer_groups.h): what crosses ranks goes through them
  // (exchange.h), the optimizers compute the math of one step.
  // The ranks that hold the same parameters (data- and tensor-parallel ranks: each its part of a
  // split tensor); null or one rank: none. Muon's Newton–Schulz and Shampoo's blocks then run
  // once each, on their owner, and `owners` hands the results to all.
  std::shared_ptr<ShareGroup> group = nullptr;
  // Tensor parallelism inside `group`: group index = data index · tensor + tensor rank, and `tp` is
  // this rank's tensor-parallel group (optimizer.muon.tp_mode). tensor = 1: none.
  std::shared_ptr<ShareGroup> tp = nullptr;
  int tensor = 1;
  // The ranks of `group` that hold the same parts (its data-parallel ranks: one per data index,
  // group index / tensor); null: `group` itself (no tensor parallelism). Gradient roots
  // (Optimizer::gradient_roots) are indices in this group, and the element-wise state is divided over it.
  std::shared_ptr<ShareGroup> replicas = nullptr;
  // parallel.distributed_optimizer: the element-wise state (AdamW's moments, of AdamW runs and of
  // the AdamW-routed parameters of every other optimizer) is split in contiguous ranges over
  // `replicas` instead of replicated on each of its ranks (AdamWGroup in optim_internal.h).
  bool distribute_elementwise = false;
  // With distribute_elementwise: the ranges of the element-wise state over `replicas` (worker/
  // parallel's range_planner, distributed_optimizer.h); it must be given then.
  RangePlanner ranges = nullptr;
  // Who computes the expensive per-matrix (per-block) units and how their results reach every rank
  // of `group` (worker/parallel's owner_planner, distributed_optimizer.h). Null: this rank alone
  // (solo_results); it must be given with a group of several ranks.
  OwnerPlanner owners = nullptr;
  const std::shared_ptr<ShareGroup>& replica_group() const { return replicas ? replicas : group; }
};

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(
    const OptimizerConfig&, const std::vector<OptimParam>&, kernels::Device, const OptimizerHooks&)>;

void register_optimizer(const std::string& name, OptimizerFactory factory);
// Builds config.name's optimizer over all params; throws OptimizerError for an unknown name.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                          kernels::Device device, const OptimizerHooks& hooks = {});

// The learning-rate multiplier at a 1-based step: linear warm-up to 1, then constant, cosine or
// linear decay to min_lr_ratio, or warmup-stable-decay (the last decay_fraction of the steps).
double lr_multiplier(const OptimizerConfig& config, int64_t step, int64_t total_steps);

}  // namespace precon::worker
