// precon best EXP: rankings at equal steps and equal wall-clock, and the Pareto front of
// (objective, seconds per step).
#include <iostream>

#include "orchestrator/cli/common.h"
#include "orchestrator/service/queries.h"

namespace precon::cli {

void add_best(CLI::App& app) {
  auto which = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("best", "rank an experiment's trials for the compute spent");
  cmd->add_option("experiment", *which, "experiment id or name")->required();
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([which] {
    guarded([&] {
      orch::Store store = open_store();
      orch::BestReport report = orch::best_report(store, lookup_experiment(store, *which));
      if (global().json) std::cout << orch::best_to_json(report).dump(2) << "\n";
      else std::cout << orch::format_best_table(report);
    });
  });
}

}  // namespace precon::cli
