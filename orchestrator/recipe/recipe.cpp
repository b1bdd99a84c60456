#include "orchestrator/recipe/recipe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <variant>

#include "worker/config/keys.h"

namespace precon::orch {

namespace {

using worker::ConfigError;

// The recipe's own scalar keys, documented and parsed like the worker's key table.
using SweepField = std::variant<int64_t*, std::string*>;

struct SweepKeySpec {
  std::string name;
  std::string unit;
  std::string description;
  double min;
  double max;
  std::vector<std::string> choices;
  SweepField (*field)(SweepConfig&);
};

constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<SweepKeySpec>& sweep_keys() {
  using S = SweepConfig&;
  static const std::vector<SweepKeySpec> table = {
      {"sweep.method", "", "grid: every combination; random: `samples` draws", -kInf, kInf, {"grid", "random"},
       [](S s) { return SweepField{&s.method}; }},
      {"sweep.samples", "trials", "random search: trials drawn", 1, 1e7, {}, [](S s) { return SweepField{&s.samples}; }},
      {"sweep.seed", "", "random search: seed of the draws (same seed, same trials)", 0, 9.2e18, {},
       [](S s) { return SweepField{&s.seed}; }},
      {"sweep.max_concurrent", "trials", "trials running at once", 1, 1e6, {},
       [](S s) { return SweepField{&s.max_concurrent}; }},
      {"sweep.max_attempts", "launches", "launches per trial; a retry resumes from the last checkpoint", 1, 1000, {},
       [](S s) { return SweepField{&s.max_attempts}; }},
      {"sweep.early_stop.method", "", "early stopping of trials behind the others", -kInf, kInf,
       {"asha", "median", "none"}, [](S s) { return SweepField{&s.early_stop.method}; }},
      {"sweep.early_stop.metric", "", "metric judged; \"\" = objective.metric", -kInf, kInf, {},
       [](S s) { return SweepField{&s.early_stop.metric}; }},
      {"sweep.early_stop.mode", "", "better is min or max; \"\" = objective.mode", -kInf, kInf, {"min", "max"},
       [](S s) { return SweepField{&s.early_stop.mode}; }},
      {"sweep.early_stop.min_step", "steps", "asha: first rung; median: no stopping before this step", 1, 1e12, {},
       [](S s) { return SweepField{&s.early_stop.min_step}; }},
      {"sweep.early_stop.reduction_factor", "", "asha: rungs at min_step·factor^k, 1/factor promoted", 2, 1000, {},
       [](S s) { return SweepField{&s.early_stop.reduction_factor}; }},
      {"sweep.early_stop.min_early_stopping_rate", "", "asha: rung offset s (first rung at min_step·factor^s)", 0,
       100, {}, [](S s) { return SweepField{&s.early_stop.min_early_stopping_rate}; }},
      {"sweep.early_stop.n_startup_trials", "trials", "median: trials that report before any is stopped", 0, 1e6,
       {}, [](S s) { return SweepField{&s.early_stop.n_startup_trials}; }},
      {"sweep.early_stop.interval", "steps", "median: steps between checks; 0 = every reported step", 0, 1e12, {},
       [](S s) { return SweepField{&s.early_stop.interval}; }},
  };
  return table;
}

const SweepKeySpec* find_sweep_key(const std::string& name) {
  for (const SweepKeySpec& k : sweep_keys())
    if (k.name == name) return &k;
  return nullptr;
}

const std::vector<std::string> kDistributions = {"uniform", "log_uniform", "int_uniform", "choice"};

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

std::string type_of(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

std::string hint(const std::string& key, bool trial_keys_only) {
  std::string h = trial_keys_only ? worker::closest_key(key) : worker::closest_key(key, sweep_key_names());
  return h.empty() ? " (`precon recipe keys` lists them)" : " (did you mean " + h + "?)";
}

[[noreturn]] void unknown_key(const std::string& source, int line, const std::string& key) {
  throw ConfigError(source, line, key, "unknown key" + hint(key, false));
}

void set_sweep_key(SweepConfig& sweep, const SweepKeySpec& k, const toml::node& value, const std::string& source,
                   int line) {
  SweepField ref = k.field(sweep);
  if (auto p = std::get_if<int64_t*>(&ref)) {
    auto v = value.value_exact<int64_t>();
    if (!v) throw ConfigError(source, line, k.name, "expected integer, got " + type_of(value));
    if (*v < k.min || *v > k.max) {
      std::ostringstream msg;
      msg << "value " << *v << " is out of range: expected " << (k.max < 1e12 ? "between " : ">= ") << k.min;
      if (k.max < 1e12) msg << " and " << k.max;
      throw ConfigError(source, line, k.name, msg.str());
    }
    **p = *v;
    return;
  }
  auto v = value.value_exact<std::string>();
  std::string expected = "string";
  if (!k.choices.empty()) {
    expected = "one of";
    for (size_t i = 0; i < k.choices.size(); ++i) expected += (i ? ", \"" : " \"") + k.choices[i] + "\"";
  }
  if (!v) throw ConfigError(source, line, k.name, "expected " + expected + ", got " + type_of(value));
  if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), *v) == k.choices.end())
    throw ConfigError(source, line, k.name, "\"" + *v + "\" is not " + expected);
  *std::get<std::string*>(ref) = *v;
}

// Type- and range-checks one value of a swept key through the worker's parser.
void check_value(const std::string& key, const toml::node& value, const std::string& source, int line) {
  worker::ParsedConfig scratch;
  worker::set_key(scratch, key, value, source, line);
}

const worker::KeySpec& swept_key(const std::string& key, const std::string& source, int line) {
  const worker::KeySpec* k = worker::find_key(key);
  if (!k) throw ConfigError(source, line, key, "cannot sweep an unknown key" + hint(key, true));
  return *k;
}

SweepParam values_param(const std::string& key, const toml::array& values, const std::string& source, int line) {
  swept_key(key, source, line);
  if (values.empty()) throw ConfigError(source, line, key, "empty list of values: give at least one");
  for (const toml::node& v : values) check_value(key, v, source, line ? std::max(line, line_of(v)) : 0);
  SweepParam p;
  p.key = key;
  p.line = line;
  p.values = values;
  return p;
}

SweepParam distribution_param(const std::string& key, const toml::table& table, const std::string& source,
                              int line) {
  const worker::KeySpec& spec = swept_key(key, source, line);
  const std::string expected = "a distribution table has one entry: { uniform | log_uniform | int_uniform = "
                               "[lo, hi] } or { choice = [v, ...] }";
  if (table.size() != 1) throw ConfigError(source, line, key, expected);
  const auto entry = table.begin();
  const std::string name(entry->first.str());
  const toml::node& dnode = entry->second;
  auto it = std::find(kDistributions.begin(), kDistributions.end(), name);
  if (it == kDistributions.end()) {
    std::string h = worker::closest_key(name, kDistributions);
    if (std::find(kDistributions.begin(), kDistributions.end(), h) == kDistributions.end()) h.clear();
    throw ConfigError(source, line, key,
                      "unknown distribution \"" + name + "\"" + (h.empty() ? "; " + expected : " (did you mean " + h + "?)"));
  }
  const toml::array* arr = dnode.as_array();
  if (!arr) throw ConfigError(source, line, key, name + " expects an array, got " + type_of(dnode));
  if (name == "choice") {
    SweepParam p = values_param(key, *arr, source, line);
    p.kind = SweepKind::choice;
    return p;
  }
  SweepParam p;
  p.key = key;
  p.line = line;
  p.kind = name == "uniform" ? SweepKind::uniform : name == "log_uniform" ? SweepKind::log_uniform : SweepKind::int_uniform;
  const bool integer = p.kind == SweepKind::int_uniform;
  auto bound = [&](size_t i) -> double {
    const toml::node& b = *arr->get(i);
    if (integer) {
      if (auto v = b.value_exact<int64_t>()) return static_cast<double>(*v);
      throw ConfigError(source, line, key, name + " bounds must be integers, got " + type_of(b));
    }
    if (auto v = b.value_exact<int64_t>()) return static_cast<double>(*v);
    if (auto v = b.value_exact<double>(); v && std::isfinite(*v)) return *v;
    throw ConfigError(source, line, key, name + " bounds must be finite numbers, got " + type_of(b));
  };
  if (arr->size() != 2) throw ConfigError(source, line, key, name + " expects [lo, hi]");
  p.lo = bound(0);
  p.hi = bound(1);
  if (integer ? p.lo > p.hi : p.lo >= p.hi)
    throw ConfigError(source, line, key, name + " expects [lo, hi] with lo " + (integer ? "<=" : "<") + " hi");
  if (p.kind == SweepKind::log_uniform && p.lo <= 0) throw ConfigError(source, line, key, "log_uniform needs 0 < lo");
  const worker::KeyType type = spec.type();
  if (!integer && type != worker::KeyType::number) {
    throw ConfigError(source, line, key,
                      name + " draws real numbers but the key is " + worker::key_type_name(type) +
                          (type == worker::KeyType::integer ? "; use int_uniform" : "; use choice"));
  }
  if (integer && type != worker::KeyType::integer && type != worker::KeyType::number)
    throw ConfigError(source, line, key, "int_uniform needs a numeric key, not " + std::string(worker::key_type_name(type)));
  // Both ends in range means every draw is.
  check_value(key, *arr->get(0), source, line);
  check_value(key, *arr->get(1), source, line);
  return p;
}

struct Located {
  SweepParam param;
  int column;
};

// Flattens a [sweep.parameters] or [[sweep.grid]] table: quoted ("optimizer.lr") and dotted
// (optimizer.lr) keys both name a trial key; a table under a trial key is a distribution.
void collect(const toml::table& table, const std::string& prefix, const std::string& source, bool allow_distributions,
             std::vector<Located>& out) {
  for (auto&& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const int line = line_of(node);
    const int column = static_cast<int>(node.source().begin.column);
    if (const toml::table* sub = node.as_table()) {
      const bool one_distribution =
          sub->size() == 1 &&
          std::find(kDistributions.begin(), kDistributions.end(), sub->begin()->first.str()) != kDistributions.end();
      if (!worker::find_key(key) && !one_distribution) {
        collect(*sub, key, source, allow_distributions, out);
        continue;
      }
      if (!allow_distributions) {
        swept_key(key, source, line);
        throw ConfigError(source, line, key, "a [[sweep.grid]] table takes lists of values [v, ...], not distributions");
      }
      out.push_back({distribution_param(key, *sub, source, line), column});
    } else if (const toml::array* values = node.as_array()) {
      out.push_back({values_param(key, *values, source, line), column});
    } else {
      swept_key(key, source, line);
      throw ConfigError(source, line, key,
                        "expected a list of values [v, ...] or a distribution table, got " + type_of(node) +
                            " (a value for every trial belongs in the key's own table)");
    }
  }
}

std::vector<SweepParam> collect_sorted(const toml::table& table, const std::string& source, bool allow_distributions) {
  std::vector<Located> located;
  collect(table, "", source, allow_distributions, located);
  // toml++ orders a table by key; the sweep keeps the order of the file.
  std::stable_sort(located.begin(), located.end(), [](const Located& a, const Located& b) {
    return a.param.line != b.param.line ? a.param.line < b.param.line : a.column < b.column;
  });
  std::vector<SweepParam> out;
  for (Located& l : located) out.push_back(std::move(l.param));
  return out;
}

void parse_sweep(const toml::table& sweep, const std::string& source, SweepConfig& out) {
  for (auto&& [name, node] : sweep) {
    const std::string n(name.str());
    const int line = line_of(node);
    if (n == "parameters") {
      const toml::table* t = node.as_table();
      if (!t) throw ConfigError(source, line, "sweep.parameters", "expected a table, got " + type_of(node));
      out.parameters = collect_sorted(*t, source, true);
    } else if (n == "grid") {
      const toml::array* arr = node.as_array();
      if (!arr || arr->empty() || !arr->is_array_of_tables())
        throw ConfigError(source, line, "sweep.grid", "expected [[sweep.grid]] tables, got " + type_of(node));
      for (const toml::node& g : *arr) {
        const toml::table& t = *g.as_table();
        std::vector<SweepParam> grid = collect_sorted(t, source, false);
        if (grid.empty())
          throw ConfigError(source, line_of(g), "sweep.grid", "this [[sweep.grid]] table is empty: give each one keys");
        out.grids.push_back(std::move(grid));
      }
    } else if (n == "early_stop") {
      const toml::table* t = node.as_table();
      if (!t) throw ConfigError(source, line, "sweep.early_stop", "expected a table, got " + type_of(node));
      for (auto&& [ename, enode] : *t) {
        const std::string key = "sweep.early_stop." + std::string(ename.str());
        const SweepKeySpec* k = find_sweep_key(key);
        if (!k || enode.is_table()) unknown_key(source, line_of(enode), key);
        set_sweep_key(out, *k, enode, source, line_of(enode));
      }
    } else {
      const std::string key = "sweep." + n;
      const SweepKeySpec* k = find_sweep_key(key);
      if (!k || node.is_table()) unknown_key(source, line, key);
      set_sweep_key(out, *k, node, source, line);
    }
  }
}

void walk_trial(worker::ParsedConfig& parsed, const toml::table& table, const std::string& prefix,
                const std::string& source) {
  for (auto&& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    if (key == "sweep") continue;
    if (const toml::table* sub = node.as_table()) {
      walk_trial(parsed, *sub, key, source);
      continue;
    }
    if (!worker::find_key(key)) unknown_key(source, line_of(node), key);
    worker::set_key(parsed, key, node, source, line_of(node));
  }
}

// --set value text as TOML; a bare word is a string (the worker's apply_override does the same).
toml::table override_value(const std::string& text) {
  try {
    return toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    return toml::table{{"v", text}};
  }
}

void apply_sweep_override(SweepConfig& sweep, const std::string& key, const toml::node& value) {
  const std::string params_prefix = "sweep.parameters.";
  if (key.rfind(params_prefix, 0) == 0) {
    const std::string k = key.substr(params_prefix.size());
    SweepParam p;
    if (const toml::table* t = value.as_table()) p = distribution_param(k, *t, "--set", 0);
    else if (const toml::array* a = value.as_array()) p = values_param(k, *a, "--set", 0);
    else throw ConfigError("--set", 0, key, "expected a list of values [v, ...] or a distribution table, got " + type_of(value));
    auto it = std::find_if(sweep.parameters.begin(), sweep.parameters.end(),
                           [&](const SweepParam& q) { return q.key == k; });
    if (it != sweep.parameters.end()) *it = std::move(p);
    else sweep.parameters.push_back(std::move(p));
    return;
  }
  if (key.rfind("sweep.grid", 0) == 0)
    throw ConfigError("--set", 0, key, "[[sweep.grid]] tables cannot be set with --set; edit the recipe");
  const SweepKeySpec* k = find_sweep_key(key);
  if (!k) unknown_key("--set", 0, key);
  set_sweep_key(sweep, *k, value, "--set", 0);
}

std::string where(const std::string& source, int line) {
  return line > 0 ? source + ":" + std::to_string(line) : "--set";
}

// One key per sweep dimension: not twice in a table, not in both [sweep.parameters] and a sub-grid.
void check_sweep_keys(const SweepConfig& sweep, const std::string& source) {
  auto check_unique = [&](const std::vector<SweepParam>& params) {
    for (size_t i = 0; i < params.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (params[i].key == params[j].key)
          throw ConfigError(params[i].line ? source : "--set", params[i].line, params[i].key,
                            "duplicate key: swept twice (also at " + where(source, params[j].line) + ")");
  };
  check_unique(sweep.parameters);
  for (const auto& grid : sweep.grids) {
    check_unique(grid);
    for (const SweepParam& g : grid)
      for (const SweepParam& p : sweep.parameters)
        if (p.key == g.key)
          throw ConfigError(g.line ? source : "--set", g.line, g.key,
                            "swept both in a [[sweep.grid]] table and in [sweep.parameters] (" + where(source, p.line) +
                                "); a key belongs to one of them");
  }
  if (sweep.method == "grid") {
    for (const SweepParam& p : sweep.parameters)
      if (p.kind != SweepKind::values)
        throw ConfigError(p.line ? source : "--set", p.line, p.key,
                          std::string("a distribution (") + sweep_kind_name(p.kind) +
                              ") needs sweep.method = \"random\"; a grid takes a list of values [v, ...]");
  } else if (!sweep.grids.empty()) {
    const SweepParam& g = sweep.grids.front().front();
    throw ConfigError(g.line ? source : "--set", g.line, g.key,
                      "[[sweep.grid]] tables need sweep.method = \"grid\"; random search draws from [sweep.parameters]");
  }
}

}  // namespace

const char* sweep_kind_name(SweepKind kind) {
  switch (kind) {
    case SweepKind::values: return "values";
    case SweepKind::uniform: return "uniform";
    case SweepKind::log_uniform: return "log_uniform";
    case SweepKind::int_uniform: return "int_uniform";
    case SweepKind::choice: return "choice";
  }
  return "?";
}

const std::vector<std::string>& sweep_key_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const SweepKeySpec& k : sweep_keys()) n.push_back(k.name);
    n.push_back("sweep.parameters");
    n.push_back("sweep.grid");
    return n;
  }();
  return names;
}

Recipe parse_recipe_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
  Recipe r;
  r.source = source;
  r.text = text;
  r.overrides = overrides;
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(source, static_cast<int>(e.source().begin.line), "",
                      "TOML syntax error: " + std::string(e.description()));
  }
  walk_trial(r.base, doc, "", source);
  const toml::node* sweep_node = doc.get("sweep");
  if (sweep_node) {
    const toml::table* t = sweep_node->as_table();
    if (!t) throw ConfigError(source, line_of(*sweep_node), "sweep", "expected a table, got " + type_of(*sweep_node));
    parse_sweep(*t, source, r.sweep);
  }

  std::vector<std::string> trial_overrides;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("--set", 0, "", "expected key=value, got \"" + o + "\"");
    std::string key = o.substr(0, eq);
    key.erase(0, key.find_first_not_of(' '));
    while (!key.empty() && key.back() == ' ') key.pop_back();
    if (key.rfind("sweep.", 0) == 0) {
      toml::table v = override_value(o.substr(eq + 1));
      apply_sweep_override(r.sweep, key, *v.get("v"));
      continue;
    }
    if (!worker::find_key(key)) unknown_key("--set", 0, key);
    worker::apply_override(r.base, key + "=" + o.substr(eq + 1));
    trial_overrides.push_back(key);
  }

  SweepConfig& s = r.sweep;
  if (s.early_stop.metric.empty()) s.early_stop.metric = r.base.config.objective.metric;
  if (s.early_stop.mode.empty()) s.early_stop.mode = r.base.config.objective.mode;
  const bool swept = !s.parameters.empty() || !s.grids.empty();
  if (sweep_node && !swept)
    throw ConfigError(source, line_of(*sweep_node), "sweep",
                      "the sweep is empty: add [sweep.parameters] or [[sweep.grid]] with values, or remove [sweep] "
                      "to run one trial");
  check_sweep_keys(s, source);
  for (const std::string& key : trial_overrides) {
    auto check = [&](const std::vector<SweepParam>& params) {
      for (const SweepParam& p : params)
        if (p.key == key)
          throw ConfigError("--set", 0, key,
                            "this key is swept (" + where(source, p.line) + "); set its values with --set "
                            "sweep.parameters." + key + "=[...] or edit the sweep");
    };
    check(s.parameters);
    for (const auto& g : s.grids) check(g);
  }
  if (!swept) worker::validate_config(r.base);
  return r;
}

Recipe parse_recipe_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path, 0, "", "cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_recipe_text(ss.str(), path, overrides);
}

std::string recipe_key_table() {
  std::vector<std::string> rows;
  char line[512];
  auto row = [&](const std::string& name, const std::string& type, const std::string& def, const std::string& unit,
                 const std::string& desc) {
    std::snprintf(line, sizeof line, "%-44s %-14s %-18s %-10s %s", name.c_str(), type.c_str(), def.c_str(),
                  unit.c_str(), desc.c_str());
    rows.push_back(line);
  };
  SweepConfig defaults;
  for (const SweepKeySpec& k : sweep_keys()) {
    SweepField f = k.field(defaults);
    std::string desc = k.description;
    if (!k.choices.empty()) {
      desc += " (";
      for (size_t i = 0; i < k.choices.size(); ++i) desc += (i ? " | " : "") + k.choices[i];
      desc += ")";
    }
    if (auto p = std::get_if<int64_t*>(&f)) row(k.name, "integer", std::to_string(**p), k.unit, desc);
    else row(k.name, "string", "\"" + *std::get<std::string*>(f) + "\"", k.unit, desc);
  }
  row("sweep.parameters.<key>", "values | dist", "", "",
      "[v, ...] (grid: each value; random: a choice) or, random only, { uniform | log_uniform | int_uniform = "
      "[lo, hi] } or { choice = [v, ...] }");
  row("sweep.grid.<key>", "values", "", "",
      "[[sweep.grid]] tables: each a sub-grid of lists [v, ...]; the sweep is their union (× [sweep.parameters])");
  return worker::format_key_table(rows);
}

}  // namespace precon::orch
