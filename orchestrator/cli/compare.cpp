// precon compare TRIAL...: trials side by side: params, results and the config keys that differ.
#include <iostream>
#include <map>

#include "orchestrator/cli/common.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/service/queries.h"

namespace precon::cli {

namespace {
// Every trial key's value as TOML text, from the trial's typed config.
std::map<std::string, std::string> config_values(const orch::TrialRow& t) {
  const worker::TrialConfig config = orch::stored_trial_config(t.config_toml, "trial " + std::to_string(t.id));
  std::map<std::string, std::string> out;
  for (const worker::KeySpec* k : worker::trial_keys()) out[k->name] = worker::value_text(config, *k);
  return out;
}
}  // namespace

void add_compare(CLI::App& app) {
  auto ids = std::make_shared<std::vector<int64_t>>();
  CLI::App* cmd = app.add_subcommand("compare", "compare trials side by side");
  cmd->add_option("trials", *ids, "trial ids")->required()->expected(2, 64);
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([ids] {
    guarded([&] {
      orch::Store store = open_store();
      std::vector<orch::TrialRow> trials;
      std::vector<nlohmann::json> summaries;
      for (int64_t id : *ids) {
        const orch::TrialRow t = lookup_trial(store, id);
        auto e = store.experiment(t.experiment_id);
        trials.push_back(t);
        summaries.push_back(orch::trial_summary_json(store, t, *e));
      }
      std::vector<std::map<std::string, std::string>> configs;
      for (const auto& t : trials) configs.push_back(config_values(t));
      std::map<std::string, std::vector<std::string>> differing;
      for (const auto& [key, value] : configs[0]) {
        bool differs = false;
        for (const auto& c : configs) differs |= !c.count(key) || c.at(key) != value;
        if (differs)
          for (const auto& c : configs) differing[key].push_back(c.count(key) ? c.at(key) : "-");
      }
      if (global().json) {
        std::cout << nlohmann::json{{"trials", summaries}, {"differing_config", differing}}.dump(2) << "\n";
        return;
      }
      std::vector<std::vector<std::string>> rows{{""}};
      for (const auto& s : summaries) rows[0].push_back("trial " + std::to_string(s["id"].get<int64_t>()));
      auto add = [&](const std::string& name, auto get) {
        std::vector<std::string> row{name};
        for (const auto& s : summaries) row.push_back(get(s));
        rows.push_back(row);
      };
      add("state", [](const nlohmann::json& s) { return s["state"].get<std::string>(); });
      add("step", [](const nlohmann::json& s) { return fmt_number(s["last_step"]); });
      add("objective", [](const nlohmann::json& s) { return fmt_number(s["objective"]); });
      add("train_loss", [](const nlohmann::json& s) { return fmt_number(s["train_loss"]); });
      add("s/step", [](const nlohmann::json& s) { return fmt_number(s["step_seconds"], 3); });
      for (const auto& [key, values] : differing) {
        std::vector<std::string> row{key};
        row.insert(row.end(), values.begin(), values.end());
        rows.push_back(row);
      }
      print_table(rows);
    });
  });
}

}  // namespace precon::cli
