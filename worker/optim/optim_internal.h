// Parts shared by the optimizers in worker/optim (not part of the public interface): the AdamW
// group every run has, one allocation per state kind, phase timing and routing text.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "worker/optim/optimizer.h"

namespace precon::worker::optim {

// The visible part of a parameter-shaped storage view: wte's padded vocabulary rows are zero,
// get zero gradients and never reach an optimizer (nor its state or its routing counts).
kernels::Tensor visible(const kernels::Tensor& storage, const ParamSpec& spec);

// What this rank holds of a parameter: its tensor-parallel part's spec, or the whole spec.
ParamSpec held_spec(const OptimParam& p);

// A state tensor given in the coordinates of this rank's tensor-parallel part of `full` (its
// global_shape the part's visible shape, global_offset in it; empty: the whole part) appended as
// entries of the whole tensor: one per run along the split dim that lies in one chunk (a Q/K/V
// block's piece), each a view of the same memory. Unchanged for a row that is not split.
void append_in_full(const ParamSpec& full, TpPlace tp, NamedState state, std::vector<NamedState>& out);

// The parameters that are (matrices = true) or are not 2-D hidden matrices (ParamKind::matrix).
std::vector<OptimParam> matrix_params(const std::vector<OptimParam>& params, bool matrices);

// optimizer.weight_decay_mode = "cautious": the decay applies only where update and weight share
// a sign. OptimizerError for a value outside the key table's choices.
bool cautious_decay(const OptimizerConfig& config);

// The element type of an owner's all-gather, from `key` (optimizer.muon.comm_dtype,
// optimizer.shampoo.comm_dtype) and its value: "fp32" or "bf16".
kernels::DType comm_dtype(std::string_view key, const std::string& value);

// The owners of an optimizer's units (hooks.owners, or this rank alone without a group); throws
// OptimizerError when a group of several ranks comes without a planner.
std::unique_ptr<OwnedResults> plan_owners(const OptimizerHooks& hooks, const std::vector<OwnedUnit>& units,
                                          kernels::DType dtype, int64_t chunk, kernels::Device device);

// A 1-D or 2-D contiguous view at `ptr` with a runtime shape.
kernels::Tensor make_view(float* ptr, const std::vector<int64_t>& shape, kernels::Device device);

// One kind of optimizer state (AdamW's exp_avg, Muon's momentum, Shampoo's L, ...) in one
// zero-initialised allocation: add() every tensor in parameter-table order, then allocate() once.
// Each tensor is one contiguous range at the running offset (see StateKind in optimizer.h).
class StateBuffer {
 public:
  explicit StateBuffer(std::string kind) : kind_(std::move(kind)) {}
  // Reserves the next range; block = -1 for whole-parameter state. Returns a handle for get().
  // global_shape/global_offset: the range is a box of a larger tensor (NamedState's fields); empty:
  // the whole tensor.
  size_t add(const std::string& param, int block, std::vector<int64_t> shape, std::vector<int64_t> global_shape = {},
             std::vector<int64_t> global_offset = {});
  void allocate(kernels::Device device);
  kernels::Tensor get(size_t handle) const;
  // Adds every tensor (in offset order), or this kind's allocation; nothing when no tensor was added.
  void append_tensors(std::vector<NamedState>& out) const;
  void append_kind(std::vector<StateKind>& out) const;
  kernels::Tensor all() const { return buffer_.view({total_}); }  // the whole allocation

 private:
  struct Range {
    std::string param;
    int block;
    std::vector<int64_t> shape;
    int64_t offset;
    std::vector<int64_t> global_shape, global_offset;
  };
  std::string kind_;
  std::vector<Range> ranges_;
  int64_t total_ = 0;
  kernels::Buffer buffer_;
};

// Adds wall-clock seconds to one PhaseSeconds field for the lifetime of the object. On CUDA it
// synchronises at both ends, so asynchronous kernels are charged to the phase that queued them.
class PhaseTimer {
 public:
  PhaseTimer(double& sink, kernels::Device device);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  double& sink_;
  kernels::Device device_;
  std::chrono::steady_clock::time_point start_;
};

// AdamW hyper-parameters of one group, before the schedule's lr_scale.
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.0;
  bool cautious = false;  // optimizer.weight_decay_mode = "cautious"
};

// name = "adamw": optimizer.lr / optimizer.weight_decay. Otherwise the AdamW side group of a
// Muon/Shampoo run: adamw.lr (0 = optimizer.lr), adamw.weight_decay (-1 = optimizer.weight_decay).
// Betas and eps always come from [optimizer.adamw].
AdamWHyper adamw_hyper(const OptimizerConfig& config, bool adamw_run);

// AdamW (PyTorch semantics, kernels::adamw_update) over a set of parameters. State per parameter:
// "<param>.exp_avg", "<param>.exp_avg_sq", one allocation each.
//
// ranges: how the ranks that hold these same parameters and the same summed gradients divide the
// element-wise state (OptimizerHooks::ranges; null: every rank updates every value). Given, the
// group is Megatron's distributed optimizer: the parameters' values back to back in order are cut
// into contiguous ranges (worker/parallel's), each rank keeps the moments of its own range only and
// updates only those values, and the ranges' share hands the updated values to every rank. The
// numbers are the unsharded group's bit for bit (the update is element-wise). A range cuts a
// parameter at any value: its state is listed as up to three boxes of the parameter's shape (a
// partial first row, whole rows, a partial last row), so a checkpoint reshards to any layout.
class AdamWGroup {
 public:
  AdamWGroup(const std::vector<OptimParam>& params, const AdamWHyper& hyper, kernels::Device device,
             const RangePlanner& ranges = nullptr);
  void step(const StepContext& ctx);
  // primary: whether this rank writes the (replicated) AdamW state to checkpoints; a sharded
  // group's ranks each write their own range.
  void append_state(std::vector<NamedState>& out, bool primary = true) const;
  void append_kinds(std::vector<StateKind>& out) const;
  size_t tensors() const { return params_.size(); }
  const std::string& param_name(size_t i) const { return params_[i].name; }
  int64_t numel() const { return total_; }
  // Per parameter given: the shard rank whose range holds all of its values (its gradient need
  // only be summed there), or -1 (it spans ranges, or the group is not sharded).
  std::vector<int> roots() const;
  // Bytes this rank sent in the all-gathers of updated values (comm_cost.h).
  int64_t comm_bytes() const { return ranges_ ? ranges_->comm_bytes() : 0; }
  // Values of each moment this rank keeps.
  int64_t state_numel() const { return hi_ - lo_; }

 private:
  struct Entry {
    std::string name;
    kernels::Tensor param, grad;  // visible views (of this rank's part of a split row)
    int64_t start = 0;            // its first value in the group's concatenation
    const ParamSpec* spec = nullptr;
    TpPlace tp;                   // the store's; a split row's state is a part of the whole tensor's
  };
  // A run of this rank's range inside one parameter: values [first, first + n) of its flat view.
  struct Piece {
    size_t entry = 0;
    int64_t first = 0, n = 0;
    size_t state = 0;  // the handle of its moments in exp_avg_ / exp_avg_sq_
  };
  void add_pieces(size_t entry, int64_t first, int64_t end);
  // Copies the concatenation's values [from, to) between the parameters and contiguous memory.
  void copy_values(int64_t from, int64_t to, float* buf, bool into_buf) const;

  std::vector<Entry> params_;
  std::map<std::string, size_t> index_;  // params_ by name
  std::vector<Piece> pieces_;
  AdamWHyper hyper_;
  kernels::Device device_;
  std::unique_ptr<OwnedRanges> ranges_;  // null: every rank updates every value
  int64_t total_ = 0, lo_ = 0, hi_ = 0;  // this rank's range [lo_, hi_)
  StateBuffer exp_avg_{"exp_avg"}, exp_avg_sq_{"exp_avg_sq"};
};

// The gradient roots of an optimizer whose matrices (ParamKind::matrix) have `matrix_root` each
// (-1: read by every rank) and whose other parameters are the AdamW group's: per parameter given
// to the factory, in order; empty when no parameter has a root.
std::vector<int> merge_roots(const std::vector<OptimParam>& params, const std::vector<int>& matrix_roots,
                             const AdamWGroup& adamw);

// The state of an optimizer whose expensive state lives with owners (Shampoo, SOAP): this rank's
// tensors of each kind in `buffers` (in that order), then the AdamW side group's, written to
// checkpoints by the first rank (`adamw_primary`); and their allocations.
std::vector<NamedState> owner_state_tensors(const std::vector<const StateBuffer*>& buffers, const AdamWGroup& adamw,
                                            bool adamw_primary);
std::vector<StateKind> owner_state_kinds(const std::vector<const StateBuffer*>& buffers, const AdamWGroup& adamw);

// "muon: 24 tensors, 7.1M params"
std::string route_text(const std::string& optimizer, size_t tensors, int64_t numel);

// The built-in factories (registered by the registry on first use).
std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                      kernels::Device device, const OptimizerHooks& hooks);
std::unique_ptr<Optimizer> make_muon(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                     kernels::Device device, const OptimizerHooks& hooks);
std::unique_ptr<Optimizer> make_soap(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                     kernels::Device device, const OptimizerHooks& hooks);
std::unique_ptr<Optimizer> make_shampoo(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                        kernels::Device device, const OptimizerHooks& hooks);

}  // namespace precon::worker::optim
