#include "worker/parallel/expert_optimizers.h"

#include "worker/parallel/pipeline_state.h"

namespace precon::worker {

using nlohmann::json;

ExpertOptimizers::ExpertOptimizers(std::unique_ptr<Optimizer> dense, std::unique_ptr<Optimizer> experts,
                                   Communicator& ep)
    : dense_(std::move(dense)), experts_(std::move(experts)), ep_(ep), others_(static_cast<size_t>(ep.size())) {}

void ExpertOptimizers::step(const StepContext& ctx) {
  dense_->step(ctx);
  experts_->step(ctx);
}

std::vector<NamedState> ExpertOptimizers::state_tensors() {
  std::vector<NamedState> out = dense_->state_tensors();
  for (NamedState& s : experts_->state_tensors()) out.push_back(std::move(s));
  return out;
}

std::vector<StateKind> ExpertOptimizers::state_kinds() const {
  std::vector<StateKind> out = dense_->state_kinds();
  for (StateKind& k : experts_->state_kinds()) out.push_back(std::move(k));
  return out;
}

json ExpertOptimizers::state_scalars() const {
  json out = dense_->state_scalars();
  for (int r = 0; r < ep_.size(); ++r)
    merge_scalars(out, r == ep_.rank() ? experts_->state_scalars() : others_[static_cast<size_t>(r)]);
  return out;
}

void ExpertOptimizers::load_state_scalars(const json& scalars) {
  dense_->load_state_scalars(scalars_for(scalars, dense_->state_scalars(), true));
  // The experts' own entries (per-block values kept), without the whole-run counters.
  json mine = scalars_for(scalars, experts_->state_scalars(), true);
  for (auto& [key, value] : mine.items())
    if (value.is_number()) value = value.is_number_integer() ? json(0) : json(0.0);
  experts_->load_state_scalars(mine);
}

PhaseSeconds ExpertOptimizers::phase_seconds() const {
  const PhaseSeconds a = dense_->phase_seconds(), b = experts_->phase_seconds();
  PhaseSeconds s;
  s.newton_schulz = a.newton_schulz + b.newton_schulz;
  s.statistics = a.statistics + b.statistics;
  s.inverse_root = a.inverse_root + b.inverse_root;
  s.grafting = a.grafting + b.grafting;
  s.eigenbasis = a.eigenbasis + b.eigenbasis;
  s.adamw = a.adamw + b.adamw;
  s.other = a.other + b.other;
  s.communication = a.communication + b.communication;
  return s;
}

int64_t ExpertOptimizers::inverse_root_failures() const {
  return dense_->inverse_root_failures() + experts_->inverse_root_failures();
}

int64_t ExpertOptimizers::comm_bytes() const { return dense_->comm_bytes() + experts_->comm_bytes(); }

std::string ExpertOptimizers::routing_summary() const {
  return dense_->routing_summary() + "; this rank's routed experts: " + experts_->routing_summary();
}

void ExpertOptimizers::gather() {
  for (int r = 0; r < ep_.size(); ++r) {
    json scalars = r == ep_.rank() ? experts_->state_scalars() : json();
    broadcast_json(ep_, scalars, r);
    others_[static_cast<size_t>(r)] = std::move(scalars);
  }
}

}  // namespace precon::worker
