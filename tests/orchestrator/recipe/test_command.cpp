// A recipe's [trial] command: its placeholders resolved per trial, the parameters a program may
// take besides the key table's, what a trial stores, and each kind of bad command refused with
// its file, line and key.
#include <gtest/gtest.h>

#include <set>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "tests/orchestrator/support/recipe_failure.h"

namespace precon::orch {
namespace {

using Argv = std::vector<std::string>;

using Failure = testing::RecipeFailure;
using testing::contains;

// Parses and expands; the first problem a user would see, or an empty message.
Failure command_failure(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return testing::recipe_failure(text, "/recipes/r.toml", overrides);
}

TEST(CommandRecipe, EachTrialRunsTheCommandWithItsOwnValues) {
  const std::string text = R"([experiment]
name = "cmd"
[trial]
command = ["python3", "{recipe_dir}/train.py", "--lr={optimizer.lr}", "--width", "{width}", "--act", "{act}",
           "{{literal}}", "--bias={use_bias}", "--scale={scale}"]
[sweep.parameters]
"optimizer.lr" = [0.001, 0.01]
width = [16, 32]
act = ["tanh"]
use_bias = [true]
scale = [2.5]
)";
  const Recipe r = parse_recipe_text(text, "/recipes/r.toml");
  EXPECT_EQ(r.recipe_dir, "/recipes");
  const std::vector<TrialSpec> trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[0].command, (Argv{"python3", "/recipes/train.py", "--lr=0.001", "--width", "16", "--act", "tanh",
                                     "{literal}", "--bias=true", "--scale=2.5"}));
  EXPECT_EQ(trials[3].command, (Argv{"python3", "/recipes/train.py", "--lr=0.01", "--width", "32", "--act", "tanh",
                                     "{literal}", "--bias=true", "--scale=2.5"}));
  // A key of the table still sets the trial's config; the program's own keys are parameters only.
  EXPECT_DOUBLE_EQ(trials[3].config.optimizer.lr, 0.01);
  EXPECT_EQ(trials[1].params, nlohmann::json::parse(
                                  R"({"optimizer.lr": 0.001, "width": 32, "act": "tanh", "use_bias": true, "scale": 2.5})"));
  EXPECT_EQ(trials[1].label, "optimizer.lr=0.001 width=32 act=tanh use_bias=true scale=2.5");
}

TEST(CommandRecipe, RandomDrawsOfAProgramsOwnKeys) {
  const std::string text = R"([trial]
command = ["prog", "{lr}", "{layers}", "{act}"]
[sweep]
method = "random"
samples = 40
seed = 5
[sweep.parameters]
lr = { log_uniform = [1e-4, 1e-1] }
layers = { int_uniform = [1, 4] }
act = { choice = ["relu", "tanh"] }
)";
  const std::vector<TrialSpec> trials = expand_sweep(parse_recipe_text(text, "r.toml"));
  ASSERT_EQ(trials.size(), 40u);
  std::set<int64_t> layers;
  std::set<std::string> acts;
  for (const TrialSpec& t : trials) {
    const double lr = t.params["lr"].get<double>();
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1e-1);
    ASSERT_TRUE(t.params["layers"].is_number_integer()) << t.params;
    layers.insert(t.params["layers"].get<int64_t>());
    acts.insert(t.params["act"].get<std::string>());
    // The argument reads back as the very value drawn.
    EXPECT_EQ(std::stod(t.command[1]), lr);
    EXPECT_EQ(t.command[2], std::to_string(t.params["layers"].get<int64_t>()));
  }
  EXPECT_EQ(layers, (std::set<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(acts, (std::set<std::string>{"relu", "tanh"}));
}

TEST(CommandRecipe, TheStoredConfigCarriesTheResolvedCommand) {
  const std::string text = R"([trial]
command = ["./train", "--lr", "{optimizer.lr}", "--name", "{tag}"]
[train]
steps = 30
[sweep.parameters]
"optimizer.lr" = [0.02]
tag = ["a \"quoted\" name"]
whole = [3.0]
)";
  const std::vector<TrialSpec> trials = expand_sweep(parse_recipe_text(text, "r.toml"));
  ASSERT_EQ(trials.size(), 1u);
  const StoredTrial stored = parse_stored_trial(trials[0].config_toml, "trial 1");
  EXPECT_EQ(stored.command, (Argv{"./train", "--lr", "0.02", "--name", "a \"quoted\" name"}));
  EXPECT_EQ(stored.config.train.steps, 30);
  EXPECT_DOUBLE_EQ(stored.config.optimizer.lr, 0.02);
  EXPECT_EQ(stored_trial_config(trials[0].config_toml, "trial 1").train.steps, 30);
  // The parameters as the program's TOML reads them: a real stays a real.
  const toml::table doc = toml::parse(trials[0].config_toml);
  EXPECT_EQ(doc.at_path("trial.params")["optimizer.lr"].value<double>(), 0.02);
  EXPECT_EQ(doc.at_path("trial.params")["tag"].value<std::string>(), "a \"quoted\" name");
  EXPECT_TRUE(doc.at_path("trial.params")["whole"].is_floating_point());
  // A trainer's config has no [trial] table.
  const std::vector<TrialSpec> plain = expand_sweep(parse_recipe_text("[train]\nsteps = 30\n", "r.toml"));
  EXPECT_TRUE(parse_stored_trial(plain[0].config_toml, "trial 2").command.empty());
  EXPECT_FALSE(contains(plain[0].config_toml, "[trial]"));
}

TEST(CommandRecipe, SetReplacesTheCommand) {
  const std::string text = "[trial]\ncommand = [\"a\"]\n[sweep.parameters]\nx = [1, 2]\n";
  const std::vector<TrialSpec> trials =
      expand_sweep(parse_recipe_text(text, "r.toml", {"trial.command=[\"echo\", \"x={x}\"]"}));
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[1].command, (Argv{"echo", "x=2"}));
  // --set alone makes a recipe a command's, and so its sweep may name the program's own keys.
  const std::vector<TrialSpec> set_only =
      expand_sweep(parse_recipe_text("[sweep.parameters]\nx = [7]\n", "r.toml", {"trial.command=[\"echo\", \"{x}\"]"}));
  EXPECT_EQ(set_only[0].command, (Argv{"echo", "7"}));
}

TEST(CommandRecipe, BadCommandsAreRefusedWithFileLineAndKey) {
  struct Case {
    std::string text;
    int line;
    std::string key;
    std::string says;
  };
  const std::string sweep = "[sweep.parameters]\nwidth = [16, 32]\n";  // lines 3 and 4
  const std::vector<Case> cases = {
      {"[trial]\ncommand = \"python3 train.py\"\n" + sweep, 2, "trial.command", "expected a list of strings"},
      {"[trial]\ncommand = []\n" + sweep, 2, "trial.command", "an empty command runs nothing"},
      {"[trial]\ncommand = [\"python3\", 3]\n" + sweep, 2, "trial.command", "argument 2 is an integer, not a string"},
      {"[trial]\ncommand = [\"\", \"x\"]\n" + sweep, 2, "trial.command", "the program (argument 1) is empty"},
      {"[trial]\ncommand = [\"python3\", \"--lr={lr}\"]\n" + sweep, 2, "trial.command", "{lr} names no swept parameter"},
      {"[trial]\ncommand = [\"python3\", \"{widht}\"]\n" + sweep, 2, "trial.command", "did you mean {width}?"},
      {"[trial]\ncommand = [\"echo\", \"{\\\"a\\\": 1}\"]\n" + sweep, 2, "trial.command", "a '{' opens no placeholder"},
      {"[trial]\ncommand = [\"echo\", \"a}\"]\n" + sweep, 2, "trial.command", "a '}' closes no placeholder"},
      {"[trial]\ncommand = [\"echo\"]\nretries = 2\n" + sweep, 3, "trial.retries", "takes `command` only"},
      {"trial = 3\n" + sweep, 1, "trial", "expected a table"},
      // Without a command, a key outside the table is a mistake, as it always was.
      {"[train]\nsteps = 5\n" + sweep, 4, "width", "cannot sweep an unknown key"},
      // With one, a typo of a trial key is still refused: the program's own keys lie outside its tables.
      {"[trial]\ncommand = [\"echo\"]\n[sweep.parameters]\n\"optimizer.lrr\" = [0.1]\n", 4, "optimizer.lrr",
       "did you mean optimizer.lr?"},
      {"[trial]\ncommand = [\"echo\"]\n[sweep.parameters]\nx = [[1, 2]]\n", 4, "x", "takes strings, integers"},
      {"[trial]\ncommand = [\"echo\"]\n[sweep.parameters]\n\"a b\" = [1]\n", 4, "a b", "letters, digits"},
      {"[trial]\ncommand = [\"echo\"]\n[sweep.parameters]\nrecipe_dir = [\"/x\"]\n", 4, "recipe_dir", "placeholder"},
  };
  for (const Case& c : cases) {
    const Failure f = command_failure(c.text);
    EXPECT_EQ(f.source, "/recipes/r.toml") << c.text;
    EXPECT_EQ(f.line, c.line) << c.text << "\n" << f.message;
    EXPECT_EQ(f.key, c.key) << c.text << "\n" << f.message;
    EXPECT_TRUE(contains(f.message, c.says)) << c.text << "\n" << f.message;
  }
  // --set's mistakes name --set.
  const Failure set = command_failure("[trial]\ncommand = [\"echo\"]\n" + sweep, {"trial.command=\"python3\""});
  EXPECT_EQ(set.source, "--set");
  EXPECT_EQ(set.key, "trial.command");
  EXPECT_TRUE(contains(set.message, "expected a list of strings")) << set.message;
}

TEST(CommandRecipe, ACommandHasBounds) {
  std::string args;
  for (size_t i = 0; i <= kMaxCommandArgs; ++i) args += "\"a\", ";
  Failure f = command_failure("[trial]\ncommand = [" + args + "\"b\"]\n");
  EXPECT_EQ(f.key, "trial.command");
  EXPECT_TRUE(contains(f.message, std::to_string(kMaxCommandArgs + 2) + " arguments, more than 1024")) << f.message;
  // Within the bounds as written, past them with the values in: 64 placeholders of a 1000-byte value.
  const std::string long_value(1000, 'x');
  args.clear();
  for (int i = 0; i < 64; ++i) args += "\"{v}\", ";
  f = command_failure("[trial]\ncommand = [" + args + "\"b\"]\n[sweep.parameters]\nv = [\"" + long_value + "\"]\n");
  EXPECT_EQ(f.line, 2);
  EXPECT_TRUE(contains(f.message, "longer than 32768 bytes")) << f.message;
}

TEST(CommandRecipe, AKeyOfOneSubGridIsAParameterOfItsTrialsOnly) {
  const std::string text = R"([trial]
command = ["prog", "{depth}"]
[[sweep.grid]]
depth = [2, 3]
[[sweep.grid]]
width = [8]
)";
  const Failure f = command_failure(text);
  EXPECT_EQ(f.line, 2) << f.message;
  EXPECT_EQ(f.key, "trial.command");
  EXPECT_TRUE(contains(f.message, "sweep trial 2 (width=8): {depth} names no parameter of this trial")) << f.message;
}

TEST(CommandRecipe, AProgramsTrialsNeedNoTrainingData) {
  // The trainer's default data files do not exist here: precon-train's trials would miss them.
  const std::string sweep = "[sweep.parameters]\n\"optimizer.lr\" = [0.1, 0.2]\n";
  const std::vector<TrialSpec> trainer = expand_sweep(parse_recipe_text(sweep, "r.toml"));
  EXPECT_EQ(check_recipe_data(trainer).size(), 2u);
  EXPECT_FALSE(check_recipe_memory(trainer, 1.0).empty());
  const std::vector<TrialSpec> trials = expand_sweep(parse_recipe_text("[trial]\ncommand = [\"prog\"]\n" + sweep, "r.toml"));
  EXPECT_TRUE(check_recipe_data(trials).empty());
  EXPECT_TRUE(check_recipe_memory(trials, 1.0).empty());
}

TEST(CommandRecipe, TheShippedRecipeRunsTheScriptBesideIt) {
  const std::string dir = std::string(PRECON_SOURCE_DIR) + "/recipes";
  const std::vector<TrialSpec> trials = expand_sweep(parse_recipe_file(dir + "/command_torch.toml"));
  ASSERT_EQ(trials.size(), 6u);
  EXPECT_EQ(trials[0].command, (Argv{"python3", dir + "/command_torch.py", "--lr", "0.003", "--hidden", "8", "--steps",
                                     "40", "--step-time", "0.05"}));
  EXPECT_EQ(trials[5].command[3], "0.3");
  EXPECT_EQ(trials[5].command[5], "32");
}

TEST(CommandRecipe, TheKeyTableListsTheCommand) {
  EXPECT_TRUE(contains(recipe_key_table(), "trial.command"));
}

}  // namespace
}  // namespace precon::orch
