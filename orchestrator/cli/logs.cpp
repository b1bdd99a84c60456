// precon logs TRIAL: the tail of a trial's worker log.
#include <filesystem>
#include <iostream>

#include "orchestrator/cli/common.h"
#include "orchestrator/service/views.h"

namespace precon::cli {

void add_logs(CLI::App& app) {
  auto trial = std::make_shared<int64_t>(0);
  auto stream = std::make_shared<std::string>("stderr");
  auto lines = std::make_shared<size_t>(50);
  CLI::App* cmd = app.add_subcommand("logs", "print the end of a trial's log");
  cmd->add_option("trial", *trial, "trial id")->required();
  cmd->add_option("--stream", *stream, "stdout or stderr")->check(CLI::IsMember({"stdout", "stderr"}))->capture_default_str();
  cmd->add_option("-n,--lines", *lines, "lines (1 to 100000, as the API takes)")
      ->check(CLI::Range(size_t{1}, size_t{100000}))
      ->capture_default_str();
  add_db_option(cmd);
  cmd->callback([trial, stream, lines] {
    guarded([&] {
      orch::Store store = open_store();
      const orch::TrialRow t = lookup_trial(store, *trial);
      const std::string path = t.run_dir + "/" + *stream + ".log";
      // A pending trial has no log yet: said on stderr, not an error.
      if (!std::filesystem::exists(path))
        std::cerr << "precon: trial " << t.id << " (" << orch::trial_state_name(t.state) << ") has no " << *stream
                  << " log yet (" << path << ")\n";
      else std::cout << orch::tail_file(path, *lines);
    });
  });
}

}  // namespace precon::cli
