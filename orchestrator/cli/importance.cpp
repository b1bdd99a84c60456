// precon importance EXP: each swept key's share of the objective's variance over the completed
// trials, by fANOVA (orchestrator/study/importance_report.h).
#include <iostream>

#include "orchestrator/cli/common.h"
#include "orchestrator/study/importance_report.h"

namespace precon::cli {

void add_importance(CLI::App& app) {
  auto which = std::make_shared<std::string>();
  auto settings = std::make_shared<study::ImportanceSettings>();
  CLI::App* cmd = app.add_subcommand("importance", "which swept keys mattered for an experiment's objective (fANOVA)");
  cmd->add_option("experiment", *which, "experiment id or name")->required();
  cmd->add_option("--trees", settings->trees, "trees of the random forest")->capture_default_str()->check(CLI::Range(1, 10000));
  cmd->add_option("--seed", settings->seed, "seed of the forest's bootstrap samples")->capture_default_str();
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([which, settings] {
    guarded([&] {
      orch::Store store = open_store();
      const study::ImportanceReport r = study::importance_report(store, lookup_experiment(store, *which).id, *settings);
      if (global().json) std::cout << study::importance_to_json(r).dump(2) << "\n";
      else std::cout << study::format_importance_table(r);
    });
  });
}

}  // namespace precon::cli
