// Helpers shared by the optimizers: visible views, state buffers, phase timing, routing text.
#include <algorithm>
#include <cstdio>

#include "kernels/linalg.h"
#include "worker/config/choice.h"
#include "worker/optim/exchange.h"
#include "worker/optim/optim_internal.h"
#include "worker/optim/parts.h"

namespace precon::worker::optim {

using kernels::Tensor;

Tensor visible(const Tensor& storage, const ParamSpec& spec) {
  return spec.storage_rows > 0 ? storage.narrow(0, 0, spec.shape[0]) : storage;
}

ParamSpec held_spec(const OptimParam& p) { return tp_part_spec(*p.spec, p.tp.size, p.tp.rank); }

void append_in_full(const ParamSpec& full, TpPlace tp, NamedState s, std::vector<NamedState>& out) {
  if (tp.size == 1 || full.tp_split_dim < 0) {
    out.push_back(std::move(s));
    return;
  }
  const size_t d = static_cast<size_t>(full.tp_split_dim);
  std::vector<int64_t> at = s.global_offset.empty() ? std::vector<int64_t>(static_cast<size_t>(s.tensor.ndim), 0)
                                                    : s.global_offset;
  const int64_t extent = full.storage_rows > 0 ? full.storage_rows : full.shape[d];
  const int blocks = std::max(1, full.qkv_blocks);
  const int64_t piece = extent / blocks / tp.size;
  for (int64_t x = at[d], end = at[d] + s.tensor.shape[d]; x < end;) {
    const int64_t k = x / piece, stop = std::min(end, (k + 1) * piece);
    NamedState sub = s;
    sub.tensor = s.tensor.narrow(static_cast<int>(d), x - at[d], stop - x);
    sub.offset = s.offset + (sub.tensor.f32() - s.tensor.f32());
    sub.global_shape = full.shape;
    sub.global_offset = at;
    sub.global_offset[d] = tp_chunk(extent, blocks, tp.size, static_cast<int>(k), tp.rank).start + x % piece;
    out.push_back(std::move(sub));
    x = stop;
  }
}

std::vector<OptimParam> matrix_params(const std::vector<OptimParam>& params, bool matrices) {
  std::vector<OptimParam> out;
  for (const OptimParam& p : params) {
    if ((p.spec->kind == ParamKind::matrix) == matrices) out.push_back(p);
  }
  return out;
}

bool cautious_decay(const OptimizerConfig& config) {
  constexpr Choice<bool> kCautious[] = {{"decoupled", false}, {"cautious", true}};
  return parse_choice<OptimizerError>("optimizer.weight_decay_mode", config.weight_decay_mode, kCautious);
}

kernels::DType comm_dtype(std::string_view key, const std::string& value) {
  constexpr Choice<kernels::DType> kCommDtypes[] = {{"fp32", kernels::DType::f32}, {"bf16", kernels::DType::bf16}};
  return parse_choice<OptimizerError>(key, value, kCommDtypes);
}

Tensor make_view(float* ptr, const std::vector<int64_t>& shape, kernels::Device device) {
  if (shape.size() == 1) return Tensor::view(ptr, {shape[0]}, kernels::DType::f32, device);
  if (shape.size() == 2) return Tensor::view(ptr, {shape[0], shape[1]}, kernels::DType::f32, device);
  throw OptimizerError("optimizer state must be 1-D or 2-D, got " + std::to_string(shape.size()) + " dims");
}

size_t StateBuffer::add(const std::string& param, int block, std::vector<int64_t> shape,
                        std::vector<int64_t> global_shape, std::vector<int64_t> global_offset) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  ranges_.push_back({param, block, std::move(shape), total_, std::move(global_shape), std::move(global_offset)});
  total_ += n;
  return ranges_.size() - 1;
}

void StateBuffer::allocate(kernels::Device device) {
  const int64_t n = std::max<int64_t>(total_, 1);  // a Buffer of zero bytes has no storage to view
  buffer_ = kernels::Buffer(device, static_cast<size_t>(n) * sizeof(float));
  kernels::fill_zero(buffer_.view({n}));
}

Tensor StateBuffer::get(size_t handle) const {
  const Range& r = ranges_[handle];
  return make_view(static_cast<float*>(buffer_.data()) + r.offset, r.shape, buffer_.device());
}

void StateBuffer::append_tensors(std::vector<NamedState>& out) const {
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const Range& r = ranges_[i];
    const std::string block = r.block >= 0 ? ".block" + std::to_string(r.block) : "";
    NamedState& s = out.emplace_back();
    s.name = r.param + block + "." + kind_;
    s.tensor = get(i);
    s.param = r.param;
    s.block = r.block;
    s.kind = kind_;
    s.offset = r.offset;
    s.global_shape = r.global_shape;
    s.global_offset = r.global_offset;
  }
}

void StateBuffer::append_kind(std::vector<StateKind>& out) const {
  if (!ranges_.empty()) out.push_back({kind_, buffer_.view({total_})});
}

std::unique_ptr<OwnedResults> plan_owners(const OptimizerHooks& hooks, const std::vector<OwnedUnit>& units,
                                          kernels::DType dtype, int64_t chunk, kernels::Device device) {
  if (hooks.owners) return hooks.owners(units, dtype, chunk, device);
  if (hooks.group && hooks.group->count() > 1) {
    throw OptimizerError("an optimizer over " + std::to_string(hooks.group->count()) +
                         " ranks needs OptimizerHooks::owners (worker/parallel's owner_planner)");
  }
  return solo_results(units, device);
}

PhaseTimer::PhaseTimer(double& sink, kernels::Device device) : sink_(sink), device_(device) {
  if (device_ == kernels::Device::cuda) kernels::synchronize(device_);
  start_ = std::chrono::steady_clock::now();
}

PhaseTimer::~PhaseTimer() {
  // synchronize may throw; a destructor must not, and a lost timing is harmless.
  try {
    if (device_ == kernels::Device::cuda) kernels::synchronize(device_);
  } catch (...) {
  }
  sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::vector<NamedState> owner_state_tensors(const std::vector<const StateBuffer*>& buffers, const AdamWGroup& adamw,
                                            bool adamw_primary) {
  std::vector<NamedState> out;
  for (const StateBuffer* state : buffers) state->append_tensors(out);
  adamw.append_state(out, adamw_primary);
  return out;
}

std::vector<StateKind> owner_state_kinds(const std::vector<const StateBuffer*>& buffers, const AdamWGroup& adamw) {
  std::vector<StateKind> out;
  for (const StateBuffer* state : buffers) state->append_kind(out);
  adamw.append_kinds(out);
  return out;
}

std::string route_text(const std::string& optimizer, size_t tensors, int64_t numel) {
  char count[32];
  if (numel >= 1000000) std::snprintf(count, sizeof count, "%.1fM", numel / 1e6);
  else if (numel >= 1000) std::snprintf(count, sizeof count, "%.1fK", numel / 1e3);
  else std::snprintf(count, sizeof count, "%lld", static_cast<long long>(numel));
  return optimizer + ": " + std::to_string(tensors) + " tensors, " + count + " params";
}

}  // namespace precon::worker::optim

namespace precon::worker {

namespace {

class SoloGroup final : public ShareGroup {
 public:
  int index() const override { return 0; }
  int count() const override { return 1; }
  int64_t share(const float* own, float* all, int64_t n, kernels::DType, kernels::Device device) override {
    if (own != all) {
      kernels::copy(optim::make_view(all, {n}, device), optim::make_view(const_cast<float*>(own), {n}, device));
    }
    return 0;
  }
  void sum(float*, int64_t) override {}
  void sum(double*, int64_t) override {}
  void max(int64_t*, int64_t) override {}
};

// Every unit this rank's, back to back in one buffer in unit order; share() applies them in place.
class SoloResults final : public OwnedResults {
 public:
  SoloResults(const std::vector<OwnedUnit>& units, kernels::Device device) : device_(device) {
    int64_t total = 0;
    for (const OwnedUnit& u : units) {
      if (u.parts.size() != 1) throw OptimizerError("one rank computes every unit whole, not in parts");
      offset_.push_back(total);
      numel_.push_back(u.parts[0]);
      total += u.parts[0];
    }
    buffer_ = kernels::Buffer(device, static_cast<size_t>(std::max<int64_t>(total, 1)) * sizeof(float));
  }
  bool mine(size_t) const override { return true; }
  size_t part(size_t) const override { return 0; }
  bool holds(size_t) const override { return true; }
  bool ours(size_t) const override { return true; }
  bool applies(size_t, size_t) const override { return true; }
  int root(size_t) const override { return 0; }
  int owner(size_t) const override { return 0; }
  float* own(size_t unit) override { return static_cast<float*>(buffer_.data()) + offset_[unit]; }
  void share(const Arrived& arrived, double&, double& apply_seconds) override {
    optim::PhaseTimer timer(apply_seconds, device_);
    for (size_t u = 0; u < offset_.size(); ++u) {
      if (numel_[u] > 0) arrived(u, 0, 0, numel_[u], own(u));
    }
  }
  void max(int64_t*, int64_t) override {}
  kernels::Tensor whole_gradient(const OptimParam& p) override {
    if (p.split())
      throw OptimizerError("optimizer: " + p.spec->name +
                           " is split over tensor-parallel ranks; its whole gradient needs OptimizerHooks::owners "
                           "(worker/parallel's owner_planner with the tensor-parallel group)");
    return p.spec->storage_rows > 0 ? p.grad.narrow(0, 0, p.spec->shape[0]) : p.grad;
  }
  int64_t comm_bytes() const override { return 0; }
  bool primary() const override { return true; }
  bool distributed() const override { return false; }
  std::string who() const override { return "rank 0"; }

 private:
  kernels::Device device_;
  std::vector<int64_t> offset_, numel_;
  kernels::Buffer buffer_;
};

}  // namespace

std::unique_ptr<OwnedResults> solo_results(const std::vector<OwnedUnit>& units, kernels::Device device) {
  return std::make_unique<SoloResults>(units, device);
}

std::shared_ptr<ShareGroup> solo_group() { return std::make_shared<SoloGroup>(); }

}  // namespace precon::worker
