// A recipe (docs/design.md, Recipe TOML): the trial tables and the [sweep] settings, parsed by
// the worker's one key table, and the swept values ([sweep.parameters], [[sweep.grid]]), parsed
// here against the same table. Errors are one worker::ConfigError listing every problem found (file, line, key,
// what was expected, the closest known key), in line order. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "orchestrator/recipe/command.h"
#include "orchestrator/recipe/study.h"
#include "worker/config/parse.h"

namespace precon::orch {

// How one swept key takes its values.
enum class SweepKind {
  values,       // [v, ...]: every value in a grid; a uniform random choice in random search, a category in tpe
  uniform,      // { uniform = [lo, hi] }: real, uniform in [lo, hi] (random and tpe only)
  log_uniform,  // { log_uniform = [lo, hi] }: real, uniform in log space, 0 < lo (random and tpe only)
  int_uniform,  // { int_uniform = [lo, hi] }: integer in [lo, hi], both inclusive (random and tpe only)
  choice,       // { choice = [v, ...] }: a uniform random choice (random and tpe only)
};

const char* sweep_kind_name(SweepKind kind);

struct SweepParam {
  std::string key;                   // dotted trial key, e.g. "optimizer.muon.ns_steps"
  int line = 0;                      // line in the recipe; 0 when given by --set
  SweepKind kind = SweepKind::values;
  toml::array values;                // values / choice: each already type- and range-checked
  double lo = 0.0;                   // uniform / log_uniform / int_uniform bounds, inclusive
  double hi = 0.0;
  double step = 0.0;                 // tpe, uniform / int_uniform: values lo + k·step only; 0: none
  int step_line = 0;                 // the line of `step` (0: none or --set)
};

using EarlyStopConfig = worker::EarlyStopSettings;

// The [sweep] table: its scalar settings (documented and parsed by the worker's key table) and
// the swept values.
struct SweepConfig : worker::SweepSettings {
  std::vector<SweepParam> parameters;           // [sweep.parameters], in order of appearance
  std::vector<std::vector<SweepParam>> grids;   // [[sweep.grid]]: sub-grids; the sweep is their union
  std::vector<std::pair<std::string, int>> tpe_keys;  // the [sweep.tpe] keys given, with their lines (0: --set)
  std::vector<std::pair<std::string, int>> nsga2_keys;  // the [sweep.nsga2] keys given, likewise
};

// sweep.method: every combination of the values, `samples` random draws, or `samples` trials each
// proposed by TPE from the trials before it (tpe.h; the trials are made one at a time as they run),
// or `samples` trials bred by NSGA-II from the generations before (nsga2.h; also one at a time).
enum class SweepMethod { grid, random, tpe, nsga2 };
// ConfigError for a method outside the key table's choices.
SweepMethod sweep_method(const SweepConfig& sweep);
// tpe (bohb) and nsga2: each trial is proposed from the store's trials as slots free up.
bool proposes_trials(const SweepConfig& sweep);

// The objectives trials are ranked by: objective.metrics/modes, else objective.metric/mode alone.
struct Objective {
  std::string metric;
  bool maximize = false;
};
std::vector<Objective> recipe_objectives(const worker::ObjectiveConfig& objective);

// The most steps any trial of the recipe can train: sweep.early_stop.max_step when given, else the
// largest train.steps of the base config and of the sweep's values (a list's largest, a
// distribution's upper bound). Hyperband's brackets span min_step to it.
int64_t longest_run(const SweepConfig& sweep, int64_t base_steps);

struct Recipe {
  std::string source;                  // file name (for messages)
  std::string text;                    // the recipe as given
  worker::ParsedConfig base;           // trial tables + trial-key overrides; not yet swept
  SweepConfig sweep;                   // [sweep] + sweep-key overrides
  StudyConfig study;                   // [study] + study-key overrides (study.h); present: the trials are the study's
  TrialCommand command;                // [trial] + --set trial.command (command.h); empty: the trials run precon-train
  std::string recipe_dir;              // with a command: the recipe file's directory, absolute ({recipe_dir})
  std::vector<std::string> overrides;  // the --set assignments, as given
};

// Parses and checks a recipe. `overrides` are --set "key=value" (TOML value, bare words are
// strings) for trial keys, scalar sweep keys (sweep.samples, sweep.early_stop.method, ...) and
// swept keys (sweep.parameters.<key>=[...] or ={ log_uniform = [lo, hi] }). A trial key that the
// sweep also sets cannot be overridden (the sweep would win silently). Without [sweep] or [study]
// the recipe is one trial and the base config is validated here; with one, every trial is
// validated by expand_sweep. Scalar [study] keys take --set study.<key>=value, the command --set
// trial.command=[...]. With a command, the sweep may also name parameters of the program's own
// (keys outside the key table's tables), and each {key} of the command must name a swept key.
Recipe parse_recipe_text(const std::string& text, const std::string& source,
                         const std::vector<std::string>& overrides = {});
Recipe parse_recipe_file(const std::string& path, const std::vector<std::string>& overrides = {});

// The dotted names of the [sweep] keys (sweep.method, sweep.early_stop.min_step, ...) and tables.
const std::vector<std::string>& sweep_key_names();

// The typed config a trial stores (its resolved TOML, written by expand_sweep), read back through
// the key table (a command trial's [trial] table aside: parse_stored_trial); `who` names the trial
// in errors.
worker::TrialConfig stored_trial_config(const std::string& config_toml, const std::string& who);

// The worker's key table plus the [sweep], [study] and [trial] rows, in the same layout
// (`precon recipe keys`), or as docs/keys.md (`--format markdown`).
std::string recipe_key_table(worker::KeyTableFormat format = worker::KeyTableFormat::text);

}  // namespace precon::orch
