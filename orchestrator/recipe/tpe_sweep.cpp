#include "orchestrator/recipe/tpe_sweep.h"

#include <cmath>
#include <limits>

namespace precon::orch {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TpeParam tpe_param(const SweepParam& p) {
  TpeParam t;
  switch (p.kind) {
    case SweepKind::values:
    case SweepKind::choice:
      t.kind = TpeParam::categorical;
      t.choices = static_cast<int64_t>(p.values.size());
      break;
    case SweepKind::uniform:
    case SweepKind::log_uniform:
      t.kind = TpeParam::real;
      t.log = p.kind == SweepKind::log_uniform;
      break;
    case SweepKind::int_uniform:
      t.kind = TpeParam::integer;
      break;
  }
  t.lo = p.lo;
  t.hi = p.hi;
  t.step = p.kind == SweepKind::int_uniform ? std::max(p.step, 1.0) : p.step;
  return t;
}

nlohmann::json node_json(const toml::node& n) {
  if (auto s = n.value_exact<std::string>()) return *s;
  if (auto i = n.value_exact<int64_t>()) return *i;
  if (auto b = n.value_exact<bool>()) return *b;
  if (auto d = n.value_exact<double>()) return *d;
  if (const toml::array* a = n.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const toml::node& e : *a) out.push_back(node_json(e));
    return out;
  }
  return nullptr;
}

// A stored value in internal form: its choice's index, or the number; NaN when it is none of them.
double internal_value(const SweepParam& p, const nlohmann::json& v) {
  if (p.kind == SweepKind::values || p.kind == SweepKind::choice) {
    for (size_t i = 0; i < p.values.size(); ++i) {
      const nlohmann::json c = node_json(*p.values.get(i));
      // The config may hold a listed 5 as 5.0: numbers compare by value.
      if (c == v || (c.is_number() && v.is_number() && c.get<double>() == v.get<double>())) return static_cast<double>(i);
    }
    return kNaN;
  }
  if (!v.is_number()) return kNaN;
  const double x = v.get<double>();
  return x >= p.lo && x <= p.hi ? x : kNaN;
}

SweepPick pick_of(const SweepParam& p, double x) {
  SweepPick pick;
  pick.param = &p;
  if (p.kind == SweepKind::values || p.kind == SweepKind::choice) pick.node = p.values.get(static_cast<size_t>(x));
  else if (p.kind == SweepKind::int_uniform)
    // int64's ends are not all doubles: 2^63 (hi = INT64_MAX as a double) stays in range.
    pick.integer = x >= 0x1p63 ? std::numeric_limits<int64_t>::max()
                               : x <= -0x1p63 ? std::numeric_limits<int64_t>::min() : std::llround(x);
  else pick.real = x;
  return pick;
}

// Values of `params` for `keys`, in internal form; false when one is missing or outside its range.
bool read_values(const std::vector<SweepParam>& keys, const nlohmann::json& params, std::vector<double>& out) {
  out.clear();
  for (const SweepParam& p : keys) {
    auto it = params.find(p.key);
    if (it == params.end()) return false;
    out.push_back(internal_value(p, *it));
    if (std::isnan(out.back())) return false;
  }
  return true;
}

// The [[sweep.grid]] table a trial came from: the first whose keys it has, each in range.
int64_t table_of(const SweepConfig& sweep, const nlohmann::json& params) {
  std::vector<double> scratch;
  for (size_t g = 0; g < sweep.grids.size(); ++g) {
    if (params.size() != sweep.parameters.size() + sweep.grids[g].size()) continue;
    if (read_values(sweep.grids[g], params, scratch)) return static_cast<int64_t>(g);
  }
  return -1;
}

// Several objectives: a complete trial's values as losses (a "max" one negated); the others NaN
// (MOTPE observes complete trials only). One objective: none.
std::vector<double> losses_of(const TpeHistoryTrial& h, const std::vector<Objective>& objectives) {
  if (objectives.size() < 2) return {};
  std::vector<double> out(objectives.size(), kNaN);
  if (h.state != TpeObservation::complete || h.values.size() != objectives.size()) return out;
  for (size_t i = 0; i < objectives.size(); ++i) out[i] = objectives[i].maximize ? -h.values[i] : h.values[i];
  return out;
}

TpeObservation observation(const TpeHistoryTrial& h, std::vector<double> x, const std::vector<Objective>& objectives) {
  TpeObservation o;
  o.state = h.state;
  o.value = h.value;
  o.step = h.step;
  o.x = std::move(x);
  o.losses = losses_of(h, objectives);
  return o;
}

// One random stream per trial: the same history gives the same proposal, whatever ran before.
Rng trial_stream(const SweepConfig& sweep, int64_t index) {
  uint64_t state = static_cast<uint64_t>(sweep.seed) ^ (0xd1b54a32d192ed03ULL * static_cast<uint64_t>(index + 1));
  return Rng(splitmix64(state));
}

}  // namespace

TrialSpec propose_tpe_trial(const Recipe& recipe, int64_t index, const std::vector<TpeHistoryTrial>& history,
                            TpeSuggestion* detail) {
  const SweepConfig& sweep = recipe.sweep;
  const bool maximize = recipe.base.config.objective.mode == "max";
  const bool tables = !sweep.grids.empty();
  Rng rng = trial_stream(sweep, index);
  const std::vector<Objective> objectives = recipe_objectives(recipe.base.config.objective);

  std::vector<TpeParam> common;
  for (const SweepParam& p : sweep.parameters) common.push_back(tpe_param(p));
  if (tables) {
    TpeParam t;
    t.kind = TpeParam::categorical;
    t.choices = static_cast<int64_t>(sweep.grids.size());
    common.push_back(t);
  }
  std::vector<TpeObservation> seen;
  std::vector<int64_t> table_of_trial;
  std::vector<const nlohmann::json*> params_of;
  std::vector<double> x;
  for (const TpeHistoryTrial& h : history) {
    const int64_t table = tables ? table_of(sweep, h.params) : -1;
    if (!read_values(sweep.parameters, h.params, x) || (tables && table < 0)) continue;  // not of this sweep
    if (tables) x.push_back(static_cast<double>(table));
    seen.push_back(observation(h, x, objectives));
    table_of_trial.push_back(table);
    params_of.push_back(&h.params);
  }
  TpeSuggestion s;
  s.common = tpe_propose(common, seen, sweep.tpe, maximize, rng);
  std::vector<SweepPick> picks;
  for (size_t i = 0; i < sweep.parameters.size(); ++i) picks.push_back(pick_of(sweep.parameters[i], s.common.x[i]));
  if (tables) {
    s.table = static_cast<int64_t>(s.common.x.back());
    const std::vector<SweepParam>& keys = sweep.grids[static_cast<size_t>(s.table)];
    std::vector<TpeParam> space;
    for (const SweepParam& p : keys) space.push_back(tpe_param(p));
    // Every trial is ranked; only the table's own trials carry its keys.
    std::vector<TpeObservation> own = seen;
    for (size_t i = 0; i < own.size(); ++i) {
      if (table_of_trial[i] == s.table) read_values(keys, *params_of[i], x);
      own[i].x = table_of_trial[i] == s.table ? x : std::vector<double>(keys.size(), kNaN);
    }
    s.branch = tpe_propose(space, own, sweep.tpe, maximize, rng);
    for (size_t i = 0; i < keys.size(); ++i) picks.push_back(pick_of(keys[i], s.branch.x[i]));
  }
  if (detail) *detail = s;
  return make_sweep_trial(recipe, index, picks);
}

TrialSpec propose_nsga2_trial(const Recipe& recipe, int64_t index, const std::vector<TpeHistoryTrial>& history) {
  const SweepConfig& sweep = recipe.sweep;
  Rng rng = trial_stream(sweep, index);
  const std::vector<Objective> objectives = recipe_objectives(recipe.base.config.objective);
  std::vector<TpeParam> space;
  for (const SweepParam& p : sweep.parameters) space.push_back(tpe_param(p));
  std::vector<NsgaTrial> trials;
  std::vector<double> x;
  for (const TpeHistoryTrial& h : history) {
    if (!read_values(sweep.parameters, h.params, x)) continue;  // not of this sweep
    NsgaTrial t;
    t.x = x;
    t.complete = h.state == TpeObservation::complete;
    if (t.complete) {
      // One objective: its value; several: each.
      t.values = objectives.size() < 2 ? std::vector<double>{h.value} : h.values;
      if (t.values.size() != objectives.size()) t.complete = false;
      for (size_t i = 0; t.complete && i < objectives.size(); ++i)
        t.losses.push_back(objectives[i].maximize ? -t.values[i] : t.values[i]);
    }
    trials.push_back(std::move(t));
  }
  const std::vector<double> point = nsga2_propose(space, trials, index, sweep.nsga2, rng);
  std::vector<SweepPick> picks;
  for (size_t i = 0; i < sweep.parameters.size(); ++i) picks.push_back(pick_of(sweep.parameters[i], point[i]));
  return make_sweep_trial(recipe, index, picks);
}

TrialSpec propose_sweep_trial(const Recipe& recipe, int64_t index, const std::vector<TpeHistoryTrial>& history) {
  if (sweep_method(recipe.sweep) == SweepMethod::nsga2) return propose_nsga2_trial(recipe, index, history);
  return propose_tpe_trial(recipe, index, history);
}

}  // namespace precon::orch
