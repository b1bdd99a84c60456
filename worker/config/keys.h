// The one key table of the recipe schema. Each row gives the dotted key, its unit, a one-line
// description, its valid range, choices or pattern, its cross-key rule, whether it is part of the
// config hash, the sbatch option it becomes, and where the value lives (a TrialConfig field for a
// trial key, a SweepSettings field for a [sweep] key), which also gives its type and default.
// `precon-train keys` and `precon recipe keys` print it; the worker's parser, the controller's
// recipe and sweep layer, `--set`, the config hash and the Slurm script all read it.
#pragma once

#include <array>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "worker/config/config.h"

namespace precon::worker {

using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<std::string>*,
                              std::vector<std::array<double, 3>>*, std::vector<int64_t>*, std::vector<DataSource>*>;

// In FieldRef's order (a key's type is its field's alternative).
enum class KeyType { integer, number, boolean, string, string_list, coefficient_list, integer_list, data_sources };

const char* key_type_name(KeyType type);

// trial: part of one trial's configuration (precon-train reads it). recipe: a [sweep] setting,
// read by the controller only; never written into a trial's config.
enum class KeyScope { trial, recipe };

struct KeySpec {
  std::string name;         // dotted, e.g. "optimizer.muon.ns_steps"
  std::string unit;         // "steps", "tokens", "" when dimensionless
  std::string description;  // one line
  double min = -std::numeric_limits<double>::infinity();  // numeric range, inclusive
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // allowed strings; empty = any
  std::string pattern;               // ECMAScript regex a string (each list entry) must match; "" = any
  std::string pattern_text;          // what the pattern allows, for the error message
  bool in_config_hash = false;       // fixes the shapes of what a checkpoint holds
  std::string sbatch;                // resources keys: the sbatch option, e.g. "partition"; "" = none
  std::function<FieldRef(TrialConfig&)> field;          // trial scope
  std::function<FieldRef(SweepSettings&)> sweep_field;  // recipe scope
  // Cross-key rule, run on the whole config: "" when it holds, else what is wrong (the key names
  // where to look). Only trial keys have rules.
  std::function<std::string(const TrialConfig&)> rule;

  KeyScope scope() const { return field ? KeyScope::trial : KeyScope::recipe; }
  KeyType type() const;
  std::string default_text() const;  // the default, rendered as TOML
  std::string expected_text() const; // "integer", "one of \"a\", \"b\"", ...
  std::string range_text() const;    // "between 1 and 100", ">= 0"
};

// Every key: trial keys in config order, then the [sweep] keys.
const std::vector<KeySpec>& recipe_keys();
// The trial-scope rows only (what a trial's config file holds), in the same order.
const std::vector<const KeySpec*>& trial_keys();
const KeySpec* find_key(std::string_view name);

// The known key closest to `name` by edit distance (for "did you mean" hints); empty if none is
// reasonably close. `extra` adds names that belong to the caller (e.g. "sweep.parameters").
std::string closest_key(std::string_view name, const std::vector<std::string>& extra = {});

// A row of the key table as printed: for the rows that are not KeySpecs (sweep.parameters.<key>,
// [study], [trial] command), which their owners describe.
struct KeyRow {
  std::string name;
  std::string type;
  std::string def;  // the default, as TOML; "" when there is none
  std::string unit;
  std::string description;
};

// text: aligned columns (`precon recipe keys`); markdown: one table per top-level table of the
// recipe (`precon recipe keys --format markdown`, the page docs/keys.md).
enum class KeyTableFormat { text, markdown };

// The table: key, type, default, unit, description. `with_recipe_keys` adds the [sweep] rows, then
// `extra_rows`.
std::string format_key_table(bool with_recipe_keys = false, const std::vector<KeyRow>& extra_rows = {},
                             KeyTableFormat format = KeyTableFormat::text);

// A bound or a value in a message: an integral number in full (1048576, not 1.04858e+06), any
// other in the shortest text that reads back the same (3e-05).
std::string number_shown(double v);

// Renders the value of one key as TOML (e.g. `5`, `"keller"`, `[[3.4, -4.7, 2.0]]`).
std::string value_text(const TrialConfig& config, const KeySpec& key);
std::string value_text(const SweepSettings& sweep, const KeySpec& key);
// The same for a bare string value: quoted and escaped as a TOML basic string.
std::string toml_quoted(const std::string& s);

}  // namespace precon::worker
