// Recipes: the worker's config parser (what precon-train reads) and the controller's recipe
// parser and sweep expansion (what `recipe check` and submit run) over the same text. Input:
// TOML text, optionally followed by a NUL and "--set" assignments, one per line.
// Allowed failure: worker::ConfigError (a refused recipe). Invariant: every expanded trial's
// stored TOML reads back to the same TOML (what a trial stores is what it runs).
#include <sstream>

#include "orchestrator/recipe/command.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/config/parse.h"

namespace {

// Bigger sweeps are legal but expanding them per input would starve the fuzzer; sweep_size is
// still computed for them.
constexpr int64_t kMaxExpandedTrials = 32;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace precon;
  const std::vector<std::string> parts = fuzz::split_nul(fuzz::as_text(data, size), 2);
  const std::vector<std::string> overrides = lines(parts[1]);
  try {
    worker::ParsedConfig parsed = worker::parse_config_text(parts[0], "fuzz.toml", overrides);
    const std::string toml = worker::config_to_toml(parsed.config);
    const worker::ParsedConfig again = worker::parse_config_text(toml, "again.toml");
    if (worker::config_to_toml(again.config) != toml) fuzz::fail("a parsed config does not read back:\n" + toml);
  } catch (const worker::ConfigError&) {
  }
  try {
    const orch::Recipe recipe = orch::parse_recipe_text(parts[0], "fuzz.toml", overrides);
    const int64_t size_of_sweep = orch::sweep_size(recipe);
    if (size_of_sweep < 0) fuzz::fail("negative sweep size");
    if (size_of_sweep > kMaxExpandedTrials) return 0;
    const std::vector<orch::TrialSpec> trials = orch::expand_sweep(recipe);
    // TPE (and BOHB) make their trials one at a time as they run: the expansion is the first one.
    const bool one_at_a_time = !recipe.study.present && (!recipe.sweep.parameters.empty() || !recipe.sweep.grids.empty()) &&
                               orch::proposes_trials(recipe.sweep);
    if (one_at_a_time && trials.size() != 1) fuzz::fail("a tpe sweep expanded to " + std::to_string(trials.size()) + " trials");
    if (!one_at_a_time && static_cast<int64_t>(trials.size()) != size_of_sweep) {
      fuzz::fail("sweep_size " + std::to_string(size_of_sweep) + " but expand_sweep made " +
                 std::to_string(trials.size()) + " trials");
    }
    for (const orch::TrialSpec& t : trials) {
      // A command trial's TOML ends with its [trial] table: the resolved command and the params.
      const orch::StoredTrial stored = orch::parse_stored_trial(t.config_toml, "trial");
      std::string again = worker::config_to_toml(stored.config);
      if (!t.command.empty()) again += orch::trial_table_toml(stored.command, t.params);
      if (again != t.config_toml) fuzz::fail("a trial's stored config does not read back:\n" + t.config_toml);
      if (stored.command != t.command) fuzz::fail("a trial's stored command is not the command it runs:\n" + t.config_toml);
    }
  } catch (const worker::ConfigError&) {
  }
  return 0;
}
