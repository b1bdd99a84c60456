// precon ls: experiments with their trial counts by state.
#include <iostream>

#include "orchestrator/cli/common.h"
#include "orchestrator/service/views.h"

namespace precon::cli {

void add_ls(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("ls", "list experiments");
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([] {
    guarded([] {
      orch::Store store = open_store();
      nlohmann::json list = nlohmann::json::array();
      std::vector<std::vector<std::string>> rows{{"ID", "NAME", "STATE", "TRIALS", "RUNNING", "DONE", "FAILED", "CREATED"}};
      for (const orch::ExperimentRow& e : store.experiments()) {
        auto trials = store.trials(e.id);
        nlohmann::json j = orch::experiment_json(e, trials);
        list.push_back(j);
        auto c = orch::state_counts(trials);
        rows.push_back({std::to_string(e.id), e.name, orch::experiment_state_name(e.state), std::to_string(trials.size()),
                        std::to_string(c["running"]), std::to_string(c["completed"] + c["pruned"]),
                        std::to_string(c["failed"]), fmt_time(e.created_at)});
      }
      if (global().json) std::cout << nlohmann::json{{"experiments", list}}.dump(2) << "\n";
      else print_table(rows);
    });
  });
}

}  // namespace precon::cli
