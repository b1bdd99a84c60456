// A recipe (DESIGN.md §5): the trial tables, parsed by the worker's key table into a base
// TrialConfig, and the [sweep] table, parsed here. Errors are worker::ConfigError naming the file,
// the line, the key, what was expected and the closest known key. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "worker/config/parse.h"

namespace precon::orch {

// How one swept key takes its values.
enum class SweepKind {
  values,       // [v, ...]: every value in a grid; a uniform random choice in random search
  uniform,      // { uniform = [lo, hi] }: real, uniform in [lo, hi] (random search only)
  log_uniform,  // { log_uniform = [lo, hi] }: real, uniform in log space, 0 < lo (random only)
  int_uniform,  // { int_uniform = [lo, hi] }: integer in [lo, hi], both inclusive (random only)
  choice,       // { choice = [v, ...] }: a uniform random choice (random only)
};

const char* sweep_kind_name(SweepKind kind);

struct SweepParam {
  std::string key;                   // dotted trial key, e.g. "optimizer.muon.ns_steps"
  int line = 0;                      // line in the recipe; 0 when given by --set
  SweepKind kind = SweepKind::values;
  toml::array values;                // values / choice: each already type- and range-checked
  double lo = 0.0;                   // uniform / log_uniform / int_uniform bounds, inclusive
  double hi = 0.0;
};

struct EarlyStopConfig {
  std::string method = "none";          // "asha" | "median" | "none"
  std::string metric;                   // metric to judge; "" in the recipe = objective.metric
  std::string mode;                     // "min" | "max"; "" in the recipe = objective.mode
  int64_t min_step = 100;               // steps: first rung (ASHA) / no stopping before (median)
  int64_t reduction_factor = 3;         // ASHA: rung k at min_step·factor^(k+rate), keeps 1/factor
  int64_t min_early_stopping_rate = 0;  // ASHA: rung offset s (as Optuna's pruner)
  int64_t n_startup_trials = 5;         // median: trials that must report before anyone stops
  int64_t interval = 0;                 // median: steps between checks; 0 = every reported step
};

struct SweepConfig {
  std::string method = "grid";                  // "grid" | "random"
  int64_t samples = 10;                         // random: trials drawn
  int64_t seed = 0;                             // random: seed of the draws
  int64_t max_concurrent = 2;                   // trials running at once
  int64_t max_attempts = 3;                     // launches per trial (first + retries)
  std::vector<SweepParam> parameters;           // [sweep.parameters], in order of appearance
  std::vector<std::vector<SweepParam>> grids;   // [[sweep.grid]]: sub-grids; the sweep is their union
  EarlyStopConfig early_stop;                   // [sweep.early_stop]
};

struct Recipe {
  std::string source;                  // file name (for messages)
  std::string text;                    // the recipe as given
  worker::ParsedConfig base;           // trial tables + trial-key overrides; not yet swept
  SweepConfig sweep;                   // [sweep] + sweep-key overrides
  std::vector<std::string> overrides;  // the --set assignments, as given
};

// Parses and checks a recipe. `overrides` are --set "key=value" (TOML value, bare words are
// strings) for trial keys, scalar sweep keys (sweep.samples, sweep.early_stop.method, ...) and
// swept keys (sweep.parameters.<key>=[...] or ={ log_uniform = [lo, hi] }). A trial key that the
// sweep also sets cannot be overridden (the sweep would win silently). Without [sweep] the recipe
// is one trial and the base config is validated here; with one, every trial is validated by
// expand_sweep.
Recipe parse_recipe_text(const std::string& text, const std::string& source,
                         const std::vector<std::string>& overrides = {});
Recipe parse_recipe_file(const std::string& path, const std::vector<std::string>& overrides = {});

// The dotted names of the recipe's own keys (sweep.method, sweep.early_stop.min_step, ...).
const std::vector<std::string>& sweep_key_names();

// The worker's key table plus the [sweep] rows, in the same layout (`precon recipe keys`).
std::string recipe_key_table();

}  // namespace precon::orch
