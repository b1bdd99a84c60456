// Several objectives (objective.metrics / objective.modes): the lists read, the first one made
// objective.metric/mode, and what does not fit refused with file, line and key: lengths, modes,
// duplicates, both forms at once, methods and early stopping that rank by one objective.
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace precon::orch {
namespace {

bool objectives_has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string objectives_failure(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    expand_sweep(parse_recipe_text(text, "r.toml", overrides));
  } catch (const worker::ConfigError& e) {
    return e.what();
  }
  return "";
}

const std::string kObjectivesSweep =
    "[sweep]\nmethod = \"tpe\"\n[sweep.parameters]\n\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2] }\n";

TEST(RecipeObjectives, ListsReadAndFirstIsTheObjective) {
  const Recipe r = parse_recipe_text(
      "[objective]\nmetrics = [\"val_loss\", \"compute_flops\"]\nmodes = [\"min\", \"max\"]\n" + kObjectivesSweep, "r.toml");
  const std::vector<Objective> o = recipe_objectives(r.base.config.objective);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].metric, "val_loss");
  EXPECT_FALSE(o[0].maximize);
  EXPECT_EQ(o[1].metric, "compute_flops");
  EXPECT_TRUE(o[1].maximize);
  EXPECT_EQ(r.base.config.objective.metric, "val_loss");
  EXPECT_EQ(r.base.config.objective.mode, "min");
  // The plain form stays one objective.
  const Recipe one = parse_recipe_text("[objective]\nmetric = \"acc\"\nmode = \"max\"\n" + kObjectivesSweep, "r.toml");
  ASSERT_EQ(recipe_objectives(one.base.config.objective).size(), 1u);
  EXPECT_TRUE(recipe_objectives(one.base.config.objective)[0].maximize);
  // grid and random do not rank: several objectives are fine; so is nsga2.
  for (const char* method : {"grid", "random", "nsga2"})
    EXPECT_EQ(objectives_failure("[objective]\nmetrics = [\"a\", \"b\"]\nmodes = [\"min\", \"min\"]\n[sweep]\nmethod = \"" +
                                 std::string(method) + "\"\n[sweep.parameters]\n\"train.seed\" = [1, 2]\n"),
              "")
        << method;
  // --set works too.
  EXPECT_EQ(objectives_failure(kObjectivesSweep, {"objective.metrics=[\"a\", \"b\"]", "objective.modes=[\"min\", \"max\"]"}),
            "");
}

TEST(RecipeObjectives, BadKeysRefusedWithFileLineAndKey) {
  std::string f = objectives_failure("[objective]\nmetrics = [\"val_loss\", \"compute_flops\"]\nmodes = [\"min\"]\n" +
                                     kObjectivesSweep);
  EXPECT_TRUE(objectives_has(f, "r.toml:3: objective.modes: objective.modes has 1 mode(s) and objective.metrics 2 metric(s)")) << f;
  f = objectives_failure("[objective]\nmetrics = [\"a\", \"b\"]\nmodes = [\"min\", \"least\"]\n" + kObjectivesSweep);
  EXPECT_TRUE(objectives_has(f, "r.toml:3: objective.modes")) << f;
  EXPECT_TRUE(objectives_has(f, "least")) << f;
  f = objectives_failure("[objective]\nmetrics = [\"a\", \"a\"]\nmodes = [\"min\", \"max\"]\n" + kObjectivesSweep);
  EXPECT_TRUE(objectives_has(f, "r.toml:2: objective.metrics: metric \"a\" is listed twice")) << f;
  f = objectives_failure("[objective]\nmodes = [\"min\"]\n" + kObjectivesSweep);
  EXPECT_TRUE(objectives_has(f, "r.toml:2: objective.modes: objective.modes needs objective.metrics")) << f;
  f = objectives_failure("[objective]\nmetric = \"val_loss\"\nmetrics = [\"a\", \"b\"]\nmodes = [\"min\", \"min\"]\n" +
                         kObjectivesSweep);
  EXPECT_TRUE(objectives_has(f, "r.toml:2: objective.metric: objective.metric and objective.metrics/modes both given")) << f;
  f = objectives_failure("[objective]\nmetrics = [\"a\", \"b c\"]\nmodes = [\"min\", \"min\"]\n" + kObjectivesSweep);
  EXPECT_TRUE(objectives_has(f, "r.toml:2: objective.metrics")) << f;
  f = objectives_failure(kObjectivesSweep, {"objective.metrics=[\"a\", \"b\"]", "objective.modes=[\"min\"]"});
  EXPECT_TRUE(objectives_has(f, "--set: objective.modes: objective.modes has 1 mode(s)")) << f;
  // Methods and early stopping that rank by one objective.
  const std::string two = "[objective]\nmetrics = [\"a\", \"b\"]\nmodes = [\"min\", \"min\"]\n";
  f = objectives_failure(two + "[sweep]\nmethod = \"bohb\"\n[sweep.parameters]\n\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n");
  EXPECT_TRUE(objectives_has(f, "r.toml:5: sweep.method: sweep.method = \"bohb\" ranks by one objective")) << f;
  for (const char* es : {"asha", "median", "hyperband"}) {
    f = objectives_failure(two + "[sweep]\nmethod = \"tpe\"\n[sweep.early_stop]\nmethod = \"" + std::string(es) +
                           "\"\nmin_step = 1\n[sweep.parameters]\n\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n");
    EXPECT_TRUE(objectives_has(f, "r.toml:7: sweep.early_stop.method: " + std::string(es) + " ranks trials by one objective"))
        << f;
  }
  f = objectives_failure(two + "[sweep]\nmethod = \"tpe\"\n[sweep.early_stop]\nmethod = \"pareto\"\nmetric = \"a\"\n"
                               "[sweep.parameters]\n\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n");
  EXPECT_TRUE(objectives_has(f, "r.toml:8: sweep.early_stop.metric: sweep.early_stop.metric names one objective")) << f;
  EXPECT_EQ(objectives_failure(two + "[sweep]\nmethod = \"tpe\"\n[sweep.early_stop]\nmethod = \"pareto\"\n"
                                     "min_dominating = 2\n[sweep.parameters]\n\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n"),
            "");
  // [sweep.nsga2] keys need nsga2; nsga2 searches [sweep.parameters] only.
  f = objectives_failure("[sweep]\nmethod = \"tpe\"\n[sweep.nsga2]\npopulation_size = 4\n[sweep.parameters]\n"
                         "\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n");
  EXPECT_TRUE(objectives_has(f, "r.toml:4: sweep.nsga2.population_size: a [sweep.nsga2] key needs sweep.method = \"nsga2\""))
      << f;
  f = objectives_failure("[sweep]\nmethod = \"nsga2\"\n[sweep.nsga2]\npopulation_size = 1\n[sweep.parameters]\n"
                         "\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n");
  EXPECT_TRUE(objectives_has(f, "r.toml:4: sweep.nsga2.population_size")) << f;
  f = objectives_failure("[sweep]\nmethod = \"nsga2\"\n[[sweep.grid]]\n\"optimizer.lr\" = [0.1, 0.2]\n");
  EXPECT_TRUE(objectives_has(f, "r.toml:4: optimizer.lr: [[sweep.grid]] tables need sweep.method = \"grid\" or \"tpe\"")) << f;
}

}  // namespace
}  // namespace precon::orch
