// The one documented key table of the trial configuration. Each row gives the dotted key, its
// unit, a one-line description, its valid range or choices, and where the value lives in a
// TrialConfig (which also gives its type and default). `precon-train keys` and
// `precon recipe keys` print it; the parser uses it to type-check and place every value.
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
                              std::vector<std::array<double, 3>>*>;

enum class KeyType { integer, number, boolean, string, string_list, coefficient_list };

const char* key_type_name(KeyType type);

struct KeySpec {
  std::string name;         // dotted, e.g. "optimizer.muon.ns_steps"
  std::string unit;         // "steps", "tokens", "" when dimensionless
  std::string description;  // one line
  double min = -std::numeric_limits<double>::infinity();  // numeric range, inclusive
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // allowed strings; empty = any
  std::function<FieldRef(TrialConfig&)> field;

  KeyType type() const;
  std::string default_text() const;  // the default, rendered as TOML
};

const std::vector<KeySpec>& trial_keys();
const KeySpec* find_key(std::string_view name);

// The known key closest to `name` by edit distance (for "did you mean" hints); empty if none is
// reasonably close. `extra` adds names that belong to the caller (e.g. the recipe's sweep keys).
std::string closest_key(std::string_view name, const std::vector<std::string>& extra = {});

// The whole table as aligned text: key, type, default, unit, description.
std::string format_key_table(const std::vector<std::string>& extra_rows = {});

// Renders the value of one key of a config as TOML (e.g. `5`, `"keller"`, `[[3.4, -4.7, 2.0]]`).
std::string value_text(const TrialConfig& config, const KeySpec& key);

}  // namespace precon::worker
