// Sweep expansion: a parsed recipe becomes its list of trials, each with its resolved and
// validated config. Deterministic: the same recipe (and seed) gives the same trials, in the same
// order, on every platform (the random draws use our own generator, not <random>'s
// implementation-defined distributions). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/recipe/recipe.h"
#include "worker/config/config.h"

namespace precon::orch {

struct TrialSpec {
  int64_t index = 0;           // position in the expansion, from 0
  nlohmann::json params;       // swept key -> value (an object; empty without a sweep)
  std::string label;           // "key=value ..." in sweep order, e.g. "optimizer.name=muon
                               // optimizer.muon.ns_steps=5"; "" without a sweep
  worker::TrialConfig config;  // base + the trial's values, validated
  std::string config_toml;     // worker::config_to_toml(config): what the trial stores and runs;
                               // with a command, its [trial] table follows (command.h)
  std::vector<std::string> command;  // the recipe's [trial] command, placeholders resolved; empty: precon-train
};

// Sweeps larger than this are refused, whatever the method (grids, [[sweep.grid]] unions, random
// samples), before any trial is made. The key table's range for sweep.samples is the same number
// (tests/orchestrator/recipe/test_sweep.cpp holds them together).
constexpr int64_t kMaxSweepTrials = 100000;

// One swept key's value in one trial: a listed value, or a drawn number.
struct SweepPick {
  const SweepParam* param = nullptr;
  const toml::node* node = nullptr;  // the listed value; nullptr for a drawn number
  double real = 0;                   // uniform, log_uniform
  int64_t integer = 0;               // int_uniform
};

// The trial of these values: the base config with them set, validated (ConfigError naming the
// trial's values), with its params, label, TOML and command.
TrialSpec make_sweep_trial(const Recipe& recipe, int64_t index, const std::vector<SweepPick>& picks);

// Trials of the recipe:
// - a [study]: its trials (expand_study in study.h);
// - no sweep: one trial, the base config;
// - grid: the cartesian product of [sweep.parameters] in order of appearance, the first key
//   slowest; with [[sweep.grid]] tables, the union of the sub-grids in file order, each the
//   product of [sweep.parameters] (slowest) and its own keys. A combination listed by two
//   sub-grids is kept twice: the sub-grids are the user's explicit list;
// - random: `samples` draws, each key in order of appearance; lists and `choice` uniformly,
//   `uniform` in [lo, hi], `log_uniform` uniformly in log space, `int_uniform` an integer in
//   [lo, hi] both inclusive;
// - tpe: the first trial only (tpe_sweep.h proposes each later one from the trials before it).
// Throws worker::ConfigError for a sweep over kMaxSweepTrials (naming the key, its line and both
// numbers; nothing is allocated first) or a trial that fails the worker's cross-key checks (the
// message names the trial's values).
std::vector<TrialSpec> expand_sweep(const Recipe& recipe);

// The number of trials expand_sweep makes, without making them (saturates at INT64_MAX).
int64_t sweep_size(const Recipe& recipe);

// Data files the precon-train trials name (data.train and data.val: each dataset of a blend, comma-separated
// shards or a Megatron prefix; train.init_from) that do not exist, relative paths from the working
// directory, and data that the trials cannot read (worker::check_data_path: not a shard or a
// Megatron dataset, a malformed index, shorter than seq_len + 1, a sampled token past vocab_size). One line per problem with the key and the trials it hits. Empty when all is well.
std::vector<std::string> check_recipe_data(const std::vector<TrialSpec>& trials);

// precon-train trials whose model cannot fit where it will run (worker::estimate_memory: parameters, gradients,
// optimizer state and bf16 copies per node, a lower bound) against resources.mem, or for the local
// executor without it `machine_bytes` (this machine's memory; 0: unknown). One line per distinct
// problem with the estimate and the trials it hits. Empty when every trial fits.
std::vector<std::string> check_recipe_memory(const std::vector<TrialSpec>& trials, double machine_bytes);
// This machine's memory in bytes (MemTotal of /proc/meminfo), 0 when unknown.
double machine_memory_bytes();

}  // namespace precon::orch
