// precon cancel EXP | --trial ID: stops trials through the running controller (stop answer to
// the worker, which checkpoints; then SIGTERM; then SIGKILL).
#include <iostream>

#include "orchestrator/cli/common.h"
#include "orchestrator/service/queries.h"

namespace precon::cli {

void add_cancel(CLI::App& app) {
  auto which = std::make_shared<std::string>();
  auto trial = std::make_shared<int64_t>(0);
  CLI::App* cmd = app.add_subcommand("cancel", "cancel an experiment or one trial");
  cmd->add_option("experiment", *which, "experiment id or name");
  CLI::Option* trial_option = cmd->add_option("--trial", *trial, "cancel only this trial (its id)");
  add_remote_options(cmd);
  cmd->callback([which, trial, trial_option] {
    guarded([&] {
      if (trial_option->count() > 0 && *trial <= 0)
        throw std::invalid_argument("--trial must be a trial id (a positive integer), got " + std::to_string(*trial));
      if (*trial > 0) {
        call_controller("POST", "/api/v1/trials/" + std::to_string(*trial) + "/cancel");
        std::cout << "trial " << *trial << ": cancel requested\n";
        return;
      }
      if (which->empty()) throw std::invalid_argument("name an experiment or pass --trial ID");
      orch::Store store = open_store();
      const orch::ExperimentRow exp = lookup_experiment(store, *which);
      const int64_t id = exp.id;
      // Said here as well as by the controller (409), which answers the same when it ended meanwhile.
      if (exp.state != orch::ExperimentState::running) {
        throw std::runtime_error("experiment " + std::to_string(id) + " already finished (" +
                                 orch::experiment_state_name(exp.state) + "); nothing to cancel");
      }
      call_controller("POST", "/api/v1/experiments/" + std::to_string(id) + "/cancel", {}, std::chrono::minutes(2));
      std::cout << "experiment " << id << ": cancel requested\n";
    });
  });
}

}  // namespace precon::cli
