#include "worker/parallel/rank_optimizer.h"

#include "worker/parallel/distributed_optimizer.h"
#include "worker/parallel/optimizer_groups.h"

namespace precon::worker {

using nlohmann::json;

void broadcast_json(Communicator& group, json& value, int root) {
  const bool is_root = group.rank() == root;
  std::string text = is_root ? value.dump() : std::string();
  int64_t n = static_cast<int64_t>(text.size());
  group.broadcast(&n, sizeof n, root);
  text.resize(static_cast<size_t>(n));
  group.broadcast(text.data(), n, root);
  if (!is_root) value = json::parse(text);
}

void merge_scalars(json& into, const json& from) {
  if (into.is_null()) {
    into = from;
  } else if (into.is_object() && from.is_object()) {
    for (const auto& [key, value] : from.items()) merge_scalars(into[key], value);
  } else if (into.is_number_integer() && from.is_number_integer()) {
    into = into.get<int64_t>() + from.get<int64_t>();
  } else if (into.is_number() && from.is_number()) {
    into = into.get<double>() + from.get<double>();
  }
}

namespace {
// The part of `saved` that `mine` has keys for, recursively.
json keys_of(const json& saved, const json& mine) {
  if (!saved.is_object() || !mine.is_object()) return saved;
  json out = json::object();
  for (const auto& [key, value] : saved.items())
    if (mine.contains(key)) out[key] = keys_of(value, mine.at(key));
  return out;
}
}  // namespace

json scalars_for(const json& saved, const json& mine, bool counters) {
  json out = keys_of(saved, mine);
  if (!counters && out.is_object())
    for (auto& [key, value] : out.items())
      if (value.is_number()) value = value.is_number_integer() ? json(0) : json(0.0);
  return out;
}

RankOptimizer::RankOptimizer(std::vector<Part> parts) {
  for (Part& p : parts) {
    Held h{std::move(p), {}};
    h.gathered.resize(h.part.speakers.size());
    parts_.push_back(std::move(h));
  }
}

void RankOptimizer::step(const StepContext& ctx) {
  for (Held& h : parts_) h.part.optimizer->step(ctx);
}

std::vector<NamedState> RankOptimizer::state_tensors() {
  std::vector<NamedState> out;
  for (Held& h : parts_)
    for (NamedState& s : h.part.optimizer->state_tensors()) {
      if (!h.part.not_primary.empty() && s.param == h.part.not_primary) s.primary = false;
      out.push_back(std::move(s));
    }
  return out;
}

std::vector<StateKind> RankOptimizer::state_kinds() const {
  std::vector<StateKind> out;
  for (const Held& h : parts_)
    for (StateKind& k : h.part.optimizer->state_kinds()) out.push_back(std::move(k));
  return out;
}

json RankOptimizer::state_scalars() const {
  json out = json::object();
  for (const Held& h : parts_) {
    if (!h.part.peers) {
      merge_scalars(out, h.part.optimizer->state_scalars());
      continue;
    }
    for (size_t s = 0; s < h.gathered.size(); ++s)
      merge_scalars(out, s == h.part.own ? h.part.optimizer->state_scalars() : h.gathered[s]);
  }
  return out;
}

void RankOptimizer::load_state_scalars(const json& scalars) {
  for (Held& h : parts_) {
    Optimizer& o = *h.part.optimizer;
    o.load_state_scalars(scalars_for(scalars, o.state_scalars(), h.part.takes_counters));
  }
}

PhaseSeconds RankOptimizer::phase_seconds() const {
  PhaseSeconds s;
  for (const Held& h : parts_) {
    const PhaseSeconds p = h.part.optimizer->phase_seconds();
    s.newton_schulz += p.newton_schulz;
    s.statistics += p.statistics;
    s.inverse_root += p.inverse_root;
    s.grafting += p.grafting;
    s.eigenbasis += p.eigenbasis;
    s.adamw += p.adamw;
    s.other += p.other;
    s.communication += p.communication;
  }
  return s;
}

int64_t RankOptimizer::inverse_root_failures() const {
  int64_t n = 0;
  for (const Held& h : parts_) n += h.part.optimizer->inverse_root_failures();
  return n;
}

int64_t RankOptimizer::comm_bytes() const {
  int64_t n = 0;
  for (const Held& h : parts_) n += h.part.optimizer->comm_bytes();
  return n;
}

std::string RankOptimizer::routing_summary() const {
  std::string text;
  for (const Held& h : parts_)
    text += (text.empty() ? "" : "; ") + (h.part.label.empty() ? "" : h.part.label + ": ") +
            h.part.optimizer->routing_summary();
  return text;
}

std::vector<int> RankOptimizer::roots_by_row(size_t part, size_t rows) const {
  const Part& p = parts_.at(part).part;
  const std::vector<int> by_param = p.optimizer->gradient_roots();
  if (by_param.empty()) return {};
  std::vector<int> roots(rows, -1);
  for (size_t j = 0; j < p.rows.size(); ++j) roots[p.rows[j]] = by_param.at(j);
  return roots;
}

void RankOptimizer::gather() {
  for (Held& h : parts_) {
    if (auto* inner = dynamic_cast<RankOptimizer*>(h.part.optimizer.get())) inner->gather();
    if (!h.part.peers) continue;
    for (size_t s = 0; s < h.part.speakers.size(); ++s) {
      json scalars = s == h.part.own ? h.part.optimizer->state_scalars() : json();
      broadcast_json(*h.part.peers, scalars, h.part.speakers[s]);
      h.gathered[s] = std::move(scalars);
    }
  }
}

namespace {

// The distributed optimizer's hooks over the ranks that hold the same rows (`group`: group rank =
// data index · tensor + tensor rank) and those of them that hold the same parts (`replicas`).
OptimizerHooks hooks_over(const OptimizerHooks& base, const ParallelContext& par, Communicator& group,
                          Communicator& replicas, bool distribute_elementwise) {
  OptimizerHooks h = base;
  if (group.size() == 1) return h;
  h.group = share_group(&group);
  h.tp = share_group(par.tp.get());
  h.tensor = par.tensor;
  h.replicas = share_group(&replicas);
  h.distribute_elementwise = distribute_elementwise;
  if (h.distribute_elementwise) h.ranges = range_planner(h.replica_group());  // AdamW's moments divided
  h.owners = owner_planner(h.group, par.tensor, h.tp);  // who computes each matrix's (block's) work
  return h;
}

}  // namespace

std::unique_ptr<RankOptimizer> make_rank_optimizer(const OptimizerConfig& config, const ParallelContext& par,
                                                   const ParamStore& store, const std::vector<size_t>& rows,
                                                   kernels::Device device, bool distribute_elementwise,
                                                   std::function<void(const std::string&)> warn) {
  // Under expert parallelism the routed experts (this rank's) are held by other ranks than the rest.
  // A buffer (the router's bias) moves by its own rule, not the optimizer's.
  std::vector<size_t> dense_rows, expert_rows, trained_rows;
  for (size_t i : rows)
    if (trained(store.spec(i).kind)) trained_rows.push_back(i);
  for (size_t i : trained_rows) (store.spec(i).expert >= 0 && par.expert_stage ? expert_rows : dense_rows).push_back(i);
  auto params_of = [&](const std::vector<size_t>& of) {
    std::vector<OptimParam> out;
    for (size_t i : of) out.push_back({&store.spec(i), store.param(i), store.grad(i), store.tp()});
    return out;
  };
  const OptimizerHooks base{std::move(warn)};
  std::vector<RankOptimizer::Part> parts;
  // The stage's rows, held by its tensor × data ranks.
  RankOptimizer::Part dense;
  dense.optimizer = make_optimizer(config, params_of(dense_rows), device,
                                   hooks_over(base, par, *par.stage, *par.dp, distribute_elementwise));
  dense.rows = dense_rows;
  parts.push_back(std::move(dense));
  if (!expert_rows.empty()) {
    // This rank's experts, held by the ranks of its expert-parallel rank; the expert-parallel
    // ranks' counters merged (the whole run's loaded by the dense part).
    RankOptimizer::Part experts;
    experts.optimizer = make_optimizer(config, params_of(expert_rows), device,
                                       hooks_over(base, par, *par.expert_stage, *par.expert_dp, distribute_elementwise));
    experts.rows = expert_rows;
    experts.peers = par.ep.get();
    for (int e = 0; e < par.expert; ++e) experts.speakers.push_back(e);
    experts.own = static_cast<size_t>(par.ep_rank());
    experts.takes_counters = false;
    experts.label = "this rank's routed experts";
    parts.push_back(std::move(experts));
  }
  if (par.pipeline == 1) return std::make_unique<RankOptimizer>(std::move(parts));
  // Several stages: this stage's optimizer, its counters merged with the other stages' (gathered
  // from their leaders; the first stage loads the whole run's), the tied embedding's state written
  // by the first stage. A stage may hold no experts (model.moe.first_dense_layers), so the stages
  // exchange what each one's own wrapper merged.
  RankOptimizer::Part stage;
  stage.optimizer = std::make_unique<RankOptimizer>(std::move(parts));
  stage.rows = trained_rows;
  stage.peers = par.world.get();
  for (int s = 0; s < par.pipeline; ++s) stage.speakers.push_back(par.stage_leader(s));
  stage.own = static_cast<size_t>(par.pp_rank());
  stage.takes_counters = par.first_stage();
  const size_t tied = tied_embedding_row(store.table());
  if (!par.first_stage() && tied < store.size()) stage.not_primary = store.spec(tied).name;
  parts.clear();
  parts.push_back(std::move(stage));
  return std::make_unique<RankOptimizer>(std::move(parts));
}

}  // namespace precon::worker
