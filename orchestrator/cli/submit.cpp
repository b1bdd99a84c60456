// precon submit RECIPE: hands a recipe to a running controller.
#include <iostream>

#include "orchestrator/cli/common.h"
#include "worker/config/parse.h"

namespace precon::cli {

void add_submit(CLI::App& app) {
  auto recipe = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("submit", "submit a recipe to a running controller");
  cmd->add_option("recipe", *recipe, "recipe TOML file")->required();
  cmd->add_option("--set", *overrides, "override a recipe key: key=value (repeatable)");
  add_remote_options(cmd);
  add_json_option(cmd);
  cmd->callback([recipe, overrides] {
    guarded([&] {
      // Read here (a missing or unreadable file is named before the controller is asked); the
      // controller checks the keys.
      std::string text;
      worker::read_toml_file(*recipe, &text);
      // A sweep of 100,000 trials takes the controller seconds to expand and store (tens of
      // seconds on a busy machine): more than the 10 s a read is given.
      nlohmann::json r = call_controller("POST", "/api/v1/experiments",
                                         {{"recipe", text}, {"source", *recipe}, {"overrides", *overrides}},
                                         std::chrono::minutes(5));
      if (global().json) std::cout << r.dump(2) << "\n";
      else std::cout << "experiment " << r["id"] << " (" << r["name"].get<std::string>() << "): " << r["trials"]
                     << " trial(s) submitted to " << controller_url() << "\n";
    });
  });
}

}  // namespace precon::cli
