#include "orchestrator/study/importance_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "orchestrator/recipe/recipe.h"

namespace precon::study {
namespace {

using nlohmann::json;

// A swept key of the recipe: numeric on its range, or categorical.
struct Key {
  std::string name;
  bool numeric = false;
  double lo = 0.0, hi = 0.0;
};

std::vector<Key> swept_keys(const orch::Recipe& r) {
  std::vector<Key> keys;
  auto add = [&](const orch::SweepParam& p) {
    const bool numeric = p.kind == orch::SweepKind::uniform || p.kind == orch::SweepKind::log_uniform ||
                         p.kind == orch::SweepKind::int_uniform;
    auto it = std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == p.key; });
    if (it == keys.end()) {
      keys.push_back({p.key, numeric, p.lo, p.hi});
    } else if (it->numeric && numeric) {  // the same key in several [[sweep.grid]] tables: the union
      it->lo = std::min(it->lo, p.lo);
      it->hi = std::max(it->hi, p.hi);
    } else {
      it->numeric = false;
    }
  };
  for (const orch::SweepParam& p : r.sweep.parameters) add(p);
  for (const auto& grid : r.sweep.grids)
    for (const orch::SweepParam& p : grid) add(p);
  return keys;
}

}  // namespace

ImportanceReport importance_report(const orch::Store& store, int64_t experiment, const ImportanceSettings& settings) {
  const auto exp = store.experiment(experiment);
  if (!exp) throw std::out_of_range("no experiment " + std::to_string(experiment));
  ImportanceReport report;
  report.experiment = experiment;
  report.metric = exp->objective_metric;
  orch::Recipe recipe;
  try {
    const std::vector<std::string> overrides = json::parse(exp->overrides_json).get<std::vector<std::string>>();
    recipe = orch::parse_recipe_text(exp->recipe_text, exp->recipe_path.empty() ? "recipe" : exp->recipe_path, overrides);
  } catch (const std::exception& e) {
    throw ImportanceError("experiment " + std::to_string(experiment) + ": its recipe no longer parses: " + e.what());
  }
  const std::vector<Key> keys = swept_keys(recipe);
  if (keys.empty())
    throw ImportanceError("experiment " + std::to_string(experiment) +
                          " sweeps no keys ([sweep.parameters] or [[sweep.grid]]): there is nothing to rank");

  // The completed trials with a finite objective: their params and last objective value.
  std::vector<std::pair<json, double>> done;
  int64_t completed = 0;
  for (const orch::TrialRow& t : store.trials(experiment)) {
    if (t.state != orch::TrialState::completed) continue;
    ++completed;
    const std::vector<orch::MetricPoint> points = store.metrics(t.id, exp->objective_metric);
    if (points.empty() || !std::isfinite(points.back().value)) continue;
    done.emplace_back(json::parse(t.params_json), points.back().value);
  }
  if (static_cast<int64_t>(done.size()) < completed)
    report.notes.push_back(std::to_string(completed - static_cast<int64_t>(done.size())) + " completed trial(s) without a finite " +
                           exp->objective_metric + ": left out");

  // The keys every such trial has, in the recipe's order.
  std::vector<Key> used;
  for (const Key& k : keys) {
    const auto with = std::count_if(done.begin(), done.end(), [&](const auto& d) { return d.first.contains(k.name); });
    if (with == static_cast<std::ptrdiff_t>(done.size())) used.push_back(k);
    else report.notes.push_back(k.name + ": in " + std::to_string(with) + " of " + std::to_string(done.size()) +
                                " trials (a [[sweep.grid]] table's key): left out");
  }
  if (used.empty()) throw ImportanceError("no swept key is in every completed trial");

  // Categorical keys: the values the trials took, in order of first appearance.
  std::vector<std::map<std::string, int64_t>> choice_index(used.size());
  for (size_t k = 0; k < used.size(); ++k) {
    ImportanceParam p;
    p.name = used[k].name;
    p.categorical = !used[k].numeric;
    p.lo = used[k].lo;
    p.hi = used[k].hi;
    if (p.categorical) {
      for (const auto& d : done) choice_index[k].emplace(d.first[p.name].dump(), static_cast<int64_t>(choice_index[k].size()));
      p.choices = static_cast<int64_t>(choice_index[k].size());
    }
    report.params.push_back(p);
  }
  std::vector<ImportanceTrial> trials;
  for (const auto& [params, value] : done) {
    ImportanceTrial t;
    t.objective = value;
    for (size_t k = 0; k < used.size(); ++k) {
      const json& v = params[used[k].name];
      if (used[k].numeric) t.values.push_back(v.is_number() ? v.get<double>() : std::nan(""));
      else t.values.push_back(static_cast<double>(choice_index[k].at(v.dump())));
    }
    trials.push_back(std::move(t));
  }
  report.trials = static_cast<int64_t>(trials.size());
  report.importance = fanova_importance(report.params, trials, settings);
  return report;
}

json importance_to_json(const ImportanceReport& report) {
  json params = json::array(), importance = json::array();
  for (const ImportanceParam& p : report.params) {
    json j = {{"name", p.name}, {"kind", p.categorical ? "categorical" : "numeric"}};
    if (p.categorical) j["choices"] = p.choices;
    else j["range"] = {p.lo, p.hi};
    params.push_back(j);
  }
  for (const ParamImportance& i : report.importance)
    importance.push_back({{"name", i.name}, {"importance", i.importance}, {"spread", i.spread}});
  return {{"experiment", report.experiment}, {"metric", report.metric}, {"method", "fanova"},
          {"trials", report.trials}, {"params", params}, {"importance", importance}, {"notes", report.notes}};
}

std::string format_importance_table(const ImportanceReport& report) {
  size_t width = 3;
  for (const ParamImportance& i : report.importance) width = std::max(width, i.name.size());
  std::string out = "experiment " + std::to_string(report.experiment) + ": importance of each swept key for " +
                    report.metric + " (fANOVA over " + std::to_string(report.trials) + " completed trials)\n";
  out += "key" + std::string(width - 3, ' ') + "  importance  spread\n";
  for (const ParamImportance& i : report.importance) {
    char row[64];
    std::snprintf(row, sizeof row, "  %10.3f  %6.3f\n", i.importance, i.spread);
    out += i.name + std::string(width - i.name.size(), ' ') + row;
  }
  for (const std::string& n : report.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace precon::study
