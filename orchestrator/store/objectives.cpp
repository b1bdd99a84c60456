#include "orchestrator/store/objectives.h"

namespace precon::orch {

std::vector<StoredObjective> experiment_objectives(const ExperimentRow& experiment) {
  const nlohmann::json stored = nlohmann::json::parse(experiment.early_stop_json, nullptr, false);
  std::vector<StoredObjective> out;
  if (stored.is_object() && stored.contains("objectives") && stored["objectives"].is_array()) {
    for (const nlohmann::json& o : stored["objectives"]) {
      if (!o.is_object() || !o.contains("metric") || !o["metric"].is_string()) continue;
      out.push_back({o["metric"].get<std::string>(), o.value("mode", std::string("min"))});
    }
  }
  if (out.size() < 2) return {{experiment.objective_metric, experiment.objective_mode}};
  return out;
}

nlohmann::json objectives_json(const std::vector<StoredObjective>& objectives) {
  nlohmann::json out = nlohmann::json::array();
  for (const StoredObjective& o : objectives) out.push_back({{"metric", o.metric}, {"mode", o.mode}});
  return out;
}

}  // namespace precon::orch
