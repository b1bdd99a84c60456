// precon recipe keys | check FILE: the documented key table, and a dry run of a recipe.
#include <iostream>

#include "orchestrator/cli/common.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"

namespace precon::cli {

void add_recipe(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("recipe", "recipe keys and checks");
  cmd->require_subcommand(1);
  CLI::App* keys = cmd->add_subcommand("keys", "print every recipe key: type, default, unit, description");
  auto format = std::make_shared<std::string>("text");
  keys->add_option("--format", *format, "text (aligned columns) or markdown (docs/keys.md)")
      ->check(CLI::IsMember({"text", "markdown"}));
  keys->callback([format] {
    std::cout << orch::recipe_key_table(*format == "markdown" ? worker::KeyTableFormat::markdown
                                                              : worker::KeyTableFormat::text);
  });

  auto file = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  CLI::App* check = cmd->add_subcommand("check", "parse a recipe, expand its sweep and check its data files");
  check->add_option("recipe", *file, "recipe TOML file")->required();
  check->add_option("--set", *overrides, "override a recipe key: key=value (repeatable)");
  add_json_option(check);
  check->callback([file, overrides] {
    guarded([&] {
      orch::Recipe recipe = orch::parse_recipe_file(*file, *overrides);
      if (recipe.base.origin.empty() && recipe.sweep.parameters.empty() && recipe.sweep.grids.empty())
        std::cerr << "precon: warning: " << *file << " sets no keys: one trial with every default "
                  << "(`precon recipe keys` lists them)\n";
      std::vector<orch::TrialSpec> trials = orch::expand_sweep(recipe);
      std::vector<std::string> missing = orch::check_recipe_data(trials);
      const std::vector<std::string> memory = orch::check_recipe_memory(trials, orch::machine_memory_bytes());
      if (global().json) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& t : trials) {
          list.push_back({{"index", t.index}, {"params", t.params}});
          if (!t.command.empty()) list.back()["command"] = t.command;
        }
        std::cout << nlohmann::json{{"ok", missing.empty() && memory.empty()},
                                    {"trials", list},
                                    {"missing_data", missing},
                                    {"memory", memory}}
                         .dump(2)
                  << "\n";
      } else {
        std::cout << *file << ": " << trials.size() << " trial(s)\n";
        for (const auto& t : trials) {
          std::cout << "  " << t.index << "  " << (t.label.empty() ? "(base config)" : t.label) << "\n";
          if (t.command.empty()) continue;
          std::cout << "     runs";
          for (const std::string& a : t.command) std::cout << " " << shell_word(a);
          std::cout << "\n";
        }
        for (const std::string& m : missing) std::cout << "data: " << m << "\n";
        for (const std::string& m : memory) std::cout << "memory: " << m << "\n";
      }
      if (!missing.empty() || !memory.empty()) exit_code() = 1;
    });
  });
}

}  // namespace precon::cli
