// sweep.method = "tpe": its trials are made one at a time, as slots free up, each proposed from
// the experiment's trials so far (tpe_sweep.h). The store's trials are the sampler's whole state:
// a restarted controller reads them back and goes on, and a trial is made (stored pending) before
// it launches, so none is lost or run twice.
#include <cmath>
#include <limits>

#include "orchestrator/common/clock.h"
#include "orchestrator/recipe/tpe_sweep.h"
#include "orchestrator/sched/scheduler.h"

namespace precon::orch {

const Recipe* Scheduler::tpe_recipe(const ExperimentRow& exp) {
  auto it = tpe_recipes_.find(exp.id);
  if (it != tpe_recipes_.end()) return it->second.get();
  std::shared_ptr<Recipe> recipe;
  // Most experiments are not TPE's: no parse for them (a 100,000-trial grid's recipe included).
  auto names_tpe = [](const std::string& text) {
    return text.find("tpe") != std::string::npos || text.find("bohb") != std::string::npos ||
           text.find("nsga2") != std::string::npos;
  };
  if (!names_tpe(exp.recipe_text) && !names_tpe(exp.overrides_json)) {
    tpe_recipes_[exp.id] = nullptr;
    return nullptr;
  }
  try {
    const std::vector<std::string> overrides = nlohmann::json::parse(exp.overrides_json).get<std::vector<std::string>>();
    Recipe r = parse_recipe_text(exp.recipe_text, exp.recipe_path.empty() ? "recipe" : exp.recipe_path, overrides);
    if (!r.study.present && (!r.sweep.parameters.empty() || !r.sweep.grids.empty()) &&
        proposes_trials(r.sweep))
      recipe = std::make_shared<Recipe>(std::move(r));
  } catch (const std::exception& e) {
    // Stored recipes parsed when submitted; one that no longer does (a newer precon's key table)
    // keeps the trials it has.
    log("experiment " + std::to_string(exp.id) + ": its recipe no longer parses (" + e.what() + ")");
  }
  if (recipe) {
    // A cancel that a previous controller began and did not finish closes the sweep here too.
    for (int64_t cursor = 0;;) {
      const std::vector<EventRow> events = store_.events_since(cursor, 10000, exp.id);
      for (const EventRow& e : events)
        if (e.kind == "experiment_cancel") cancelled_experiments_.insert(exp.id);
      if (events.size() < 10000) break;
      cursor = events.back().id;
    }
  }
  tpe_recipes_[exp.id] = recipe;
  return recipe.get();
}

std::vector<TpeHistoryTrial> Scheduler::tpe_history(const ExperimentRow& exp, const std::vector<TrialRow>& trials,
                                                    const Recipe& recipe) {
  // Several objectives: a complete trial is ranked by every one's last value (one missing: left out).
  const std::vector<Objective> objectives = recipe_objectives(recipe.base.config.objective);
  std::vector<TpeHistoryTrial> history;
  for (const TrialRow& t : trials) {
    TpeHistoryTrial h;
    h.params = nlohmann::json::parse(t.params_json, nullptr, false);
    if (!h.params.is_object()) continue;
    switch (t.state) {
      case TrialState::pending:
      case TrialState::running:
        h.state = TpeObservation::running;
        break;
      case TrialState::completed: {
        const auto p = store_.last_metric(t.id, exp.objective_metric);
        if (!p || !std::isfinite(p->value)) continue;  // nothing to rank it by: as a failed trial
        h.state = TpeObservation::complete;
        h.value = p->value;
        if (objectives.size() > 1) {
          for (const Objective& o : objectives) {
            const auto q = store_.last_metric(t.id, o.metric);
            if (!q || !std::isfinite(q->value)) break;
            h.values.push_back(q->value);
          }
          if (h.values.size() != objectives.size()) continue;
        }
        break;
      }
      case TrialState::pruned: {
        h.state = TpeObservation::pruned;
        const auto p = store_.last_metric(t.id, exp.objective_metric);
        h.step = p ? p->step : -1;
        h.value = p ? p->value : std::numeric_limits<double>::quiet_NaN();
        break;
      }
      case TrialState::failed:
      case TrialState::cancelled:
        continue;
    }
    history.push_back(std::move(h));
  }
  return history;
}

void Scheduler::top_up_tpe(const ExperimentRow& exp, const Recipe& recipe) {
  if (cancelled_experiments_.count(exp.id)) return;
  for (;;) {
    const std::vector<TrialRow> trials = store_.trials(exp.id);
    int64_t active = 0;
    for (const TrialRow& t : trials) active += t.state == TrialState::pending || t.state == TrialState::running;
    const auto made = static_cast<int64_t>(trials.size());
    if (made >= recipe.sweep.samples || active >= exp.max_concurrent) return;
    TrialRow row;
    row.index = made;
    row.created_at = epoch_seconds();
    try {
      const TrialSpec spec = propose_sweep_trial(recipe, made, tpe_history(exp, trials, recipe));
      row.params_json = spec.params.dump();
      row.config_toml = spec.config_toml;
    } catch (const std::exception& e) {
      // Values that break a rule of the trial config: a failed trial with the reason (it counts
      // against `samples`, so a space full of such values cannot loop).
      row.params_json = "{}";
      row.config_toml = trials.empty() ? std::string() : trials.front().config_toml;
      row.state = TrialState::failed;
      row.reason = std::string(std::string(recipe.sweep.method == "nsga2" ? "nsga2" : "tpe") + " proposed values that the trial config refuses: ") + e.what();
      row.ended_at = row.created_at;
    }
    const int64_t id = store_.add_trial(exp, row);
    event(exp.id, id, "trial_proposed", std::string(recipe.sweep.method == "nsga2" ? "nsga2" : "tpe") + " proposed trial " + std::to_string(made) + ": " + row.params_json,
          nlohmann::json::parse(row.params_json));
    if (row.state == TrialState::failed) log("experiment " + std::to_string(exp.id) + ": " + row.reason);
  }
}

}  // namespace precon::orch
