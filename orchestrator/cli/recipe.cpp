// precon recipe keys | check FILE: the documented key table, and a dry run of a recipe.
#include <fstream>
#include <iostream>
#include <limits>

#include "orchestrator/cli/common.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/recipe/tpe_sweep.h"
#include "orchestrator/sched/early_stop.h"

namespace precon::cli {

namespace {

std::string steps_list(const std::vector<int64_t>& steps) {
  std::string out;
  for (int64_t s : steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out.empty() ? "none" : out;
}

// What stops the recipe's trials early, in one line ("" without early stopping): the rule, its
// metric and the steps where it decides.
std::string early_stop_line(const orch::Recipe& r) {
  const orch::EarlyStopConfig& es = r.sweep.early_stop;
  if (es.method == "none") return "";
  orch::EarlyStopSettings s;
  s.method = es.method;
  s.mode = es.mode;
  s.metric = es.metric;
  s.min_step = es.min_step;
  s.reduction_factor = es.reduction_factor;
  s.min_early_stopping_rate = es.min_early_stopping_rate;
  s.max_step = orch::longest_run(r.sweep, r.base.config.train.steps);
  const int64_t longest = s.max_step;
  const std::string on = es.metric + " (" + es.mode + ")";
  const std::string keep = "1/" + std::to_string(es.reduction_factor);
  if (es.method == "pareto") {
    std::string names;
    for (const orch::Objective& o : orch::recipe_objectives(r.base.config.objective))
      names += (names.empty() ? "" : ", ") + o.metric + " (" + (o.maximize ? "max" : "min") + ")";
    return "early stopping: the Pareto rule on " + names + " from step " + std::to_string(es.min_step) +
           ": a trial stops when " + std::to_string(es.min_dominating) +
           " completed trial(s) dominate its values at the same step";
  }
  if (es.method == "median")
    return "early stopping: the median rule on " + on + " once " + std::to_string(es.n_startup_trials) +
           " trial(s) completed, from step " + std::to_string(es.min_step);
  const orch::EarlyStopper stopper(s);
  const std::string rungs = steps_list(stopper.rungs(longest));
  // bohb keeps Optuna's composition: a trial it stops has ended (scheduler.cpp, submit).
  const std::string promotion = r.sweep.method == "bohb" ? "" : "; a stopped trial resumes once it ranks among them";
  if (es.method == "asha")
    return "early stopping: ASHA on " + on + ", rungs at steps " + rungs + " (the best " + keep + " of each goes on" +
           promotion + ")";
  return "early stopping: Hyperband on " + on + ", " + std::to_string(stopper.brackets()) + " bracket(s) of ASHA over steps " +
         std::to_string(es.min_step) + ".." + std::to_string(longest) + ", rungs at steps " + rungs +
         " (bracket b from the rung b on; the best " + keep + " of each goes on" + promotion + ")";
}

// precon recipe suggest: the trial a TPE recipe proposes next after the given trials, and the
// densities it was chosen by (what the scheduler would make; for checking a search by hand).
void add_recipe_suggest(CLI::App& cmd) {
  auto file = std::make_shared<std::string>();
  auto trials = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  CLI::App* suggest = cmd.add_subcommand("suggest", "the next trial of a sweep.method = \"tpe\" recipe after given trials");
  suggest->add_option("recipe", *file, "recipe TOML file")->required();
  suggest->add_option("--trials", *trials,
                      "JSON file: a list of {\"params\": {...}, \"state\": \"complete\"|\"pruned\"|\"running\", "
                      "\"value\": v, \"step\": n} in trial order (default: none)");
  suggest->add_option("--set", *overrides, "override a recipe key: key=value (repeatable)");
  suggest->callback([file, trials, overrides] {
    guarded([&] {
      const orch::Recipe recipe = orch::parse_recipe_file(*file, *overrides);
      if (recipe.study.present || orch::sweep_method(recipe.sweep) != orch::SweepMethod::tpe ||
          (recipe.sweep.parameters.empty() && recipe.sweep.grids.empty()))
        throw std::invalid_argument(*file + ": recipe suggest needs a sweep with method = \"tpe\"");
      std::vector<orch::TpeHistoryTrial> history;
      if (!trials->empty()) {
        std::ifstream in(*trials);
        if (!in) throw std::invalid_argument("cannot read " + *trials);
        const nlohmann::json list = nlohmann::json::parse(in);
        if (!list.is_array()) throw std::invalid_argument(*trials + ": expected a JSON list of trials");
        for (const nlohmann::json& t : list) {
          orch::TpeHistoryTrial h;
          h.params = t.at("params");
          const std::string state = t.value("state", "complete");
          if (t.contains("values")) h.values = t.at("values").get<std::vector<double>>();
          if (state == "complete") h.state = orch::TpeObservation::complete;
          else if (state == "pruned") h.state = orch::TpeObservation::pruned;
          else if (state == "running") h.state = orch::TpeObservation::running;
          else throw std::invalid_argument(*trials + ": state \"" + state + "\" is none of complete, pruned, running");
          h.value = t.value("value", std::numeric_limits<double>::quiet_NaN());
          h.step = t.value("step", int64_t{-1});
          history.push_back(std::move(h));
        }
      }
      orch::TpeSuggestion detail;
      const orch::TrialSpec next =
          orch::propose_tpe_trial(recipe, static_cast<int64_t>(history.size()), history, &detail);
      nlohmann::json out{{"index", next.index},
                         {"params", next.params},
                         {"random", detail.common.random},
                         {"log_l", detail.common.log_l + detail.branch.log_l},
                         {"log_g", detail.common.log_g + detail.branch.log_g}};
      if (detail.table >= 0) out["table"] = detail.table;
      std::cout << out.dump(2) << "\n";
    });
  });
}

}  // namespace

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

  add_recipe_suggest(*cmd);

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
        const bool tpe = !recipe.study.present && !trials.empty() && !trials.front().label.empty() &&
                         orch::proposes_trials(recipe.sweep);
        if (tpe)
          std::cout << *file << ": " << recipe.sweep.samples << " trial(s), each proposed by "
                    << (orch::sweep_method(recipe.sweep) == orch::SweepMethod::nsga2 ? "NSGA-II" : "TPE")
                    << " from the ones before it as it runs; the first:\n";
        else
          std::cout << *file << ": " << trials.size() << " trial(s)\n";
        for (const auto& t : trials) {
          std::cout << "  " << t.index << "  " << (t.label.empty() ? "(base config)" : t.label) << "\n";
          if (t.command.empty()) continue;
          std::cout << "     runs";
          for (const std::string& a : t.command) std::cout << " " << shell_word(a);
          std::cout << "\n";
        }
        if (const std::string line = early_stop_line(recipe); !line.empty()) std::cout << line << "\n";
        for (const std::string& m : missing) std::cout << "data: " << m << "\n";
        for (const std::string& m : memory) std::cout << "memory: " << m << "\n";
      }
      if (!missing.empty() || !memory.empty()) exit_code() = 1;
    });
  });
}

}  // namespace precon::cli
