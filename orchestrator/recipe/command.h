// A recipe's [trial] table (docs/recipes.md, Trials that run any program): `command`, the program
// each trial runs instead of precon-train, with `{key}` placeholders for the trial's parameters.
// Like [sweep] and [study] it is read by the controller only; a trial stores its resolved command
// in a [trial] table of its config (trial_table_toml), which parse_stored_trial reads back.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "worker/config/parse.h"

namespace precon::orch {

// The placeholder that every command may use besides its parameters: the absolute directory of
// the recipe file (a script beside the recipe runs wherever the trial's run directory is).
inline constexpr const char* kRecipeDirPlaceholder = "recipe_dir";

// Bounds on a command: what a program's command line holds in practice, far below the kernel's
// own limits, so that a hostile recipe's command cannot multiply into gigabytes over its trials.
inline constexpr size_t kMaxCommandArgs = 1024;
inline constexpr size_t kMaxCommandBytes = 32 * 1024;  // the resolved command's arguments together

struct TrialCommand {
  std::vector<std::string> argv;  // as written, placeholders unresolved; empty: the trial runs precon-train
  int line = 0;                   // trial.command's line in the recipe; 0 when given by --set
};

// Reads the [trial] table into `out`, recording every problem (file, line, key) in `issues`.
void read_trial_table(const toml::node& node, const std::string& source, TrialCommand& out,
                      worker::ConfigIssues& issues);
// --set trial.command=[...]. Throws ConfigError.
void apply_trial_override(TrialCommand& command, const std::string& key, const toml::node& value);

// The names the command's placeholders use, in order of first use. Throws ConfigError (key
// trial.command, the command's line) for a brace that opens or closes no placeholder.
std::vector<std::string> placeholder_names(const TrialCommand& command, const std::string& source);

// The argv with each {key} replaced by the parameter's value (placeholder_text) and {{ }} by
// single braces; `recipe_dir` fills {recipe_dir}. A name that is neither, or a command longer
// than kMaxCommandBytes once resolved, throws ConfigError.
std::vector<std::string> resolve_command(const TrialCommand& command, const nlohmann::json& params,
                                         const std::string& recipe_dir, const std::string& source);

// How a parameter's value reads in an argument: a string as it is, a number in the shortest text
// that reads back the same (0.001, 3, 1e-05), true or false.
std::string placeholder_text(const nlohmann::json& value);

// The [trial] table a command trial's config ends with: the resolved command and the trial's
// parameters (the same flat object as PRECON_PARAMS).
std::string trial_table_toml(const std::vector<std::string>& command, const nlohmann::json& params);

// A trial's stored config (its resolved TOML): the trial keys, through the worker's key table,
// and the command of its [trial] table (empty for precon-train). Throws ConfigError.
struct StoredTrial {
  worker::TrialConfig config;
  std::vector<std::string> command;
};
StoredTrial parse_stored_trial(const std::string& config_toml, const std::string& who);

// The row `precon recipe keys` prints for trial.command.
worker::KeyRow trial_command_key_row();

}  // namespace precon::orch
