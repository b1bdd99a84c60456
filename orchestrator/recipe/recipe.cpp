#include "orchestrator/recipe/recipe.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "worker/config/choice.h"
#include "worker/config/keys.h"

namespace precon::orch {

namespace {

using worker::ConfigError;

const std::vector<std::string> kDistributions = {"uniform", "log_uniform", "int_uniform", "choice"};

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

using worker::toml_type_name;

std::string hint(const std::string& key) {
  const std::string h = worker::closest_key(key, sweep_key_names());
  return h.empty() ? " (`precon recipe keys` lists them)" : " (did you mean " + h + "?)";
}

// Type- and range-checks one value of a swept key through the worker's parser.
void check_value(const std::string& key, const toml::node& value, const std::string& source, int line) {
  worker::ParsedConfig scratch;
  worker::set_key(scratch, key, value, source, line);
}

// The top-level tables of the key table ("model", "optimizer", ...) and the recipe's own.
const std::vector<std::string>& reserved_tables() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"sweep", "study", "trial"};
    for (const worker::KeySpec* k : worker::trial_keys()) {
      const std::string table = k->name.substr(0, k->name.find('.'));
      if (std::find(n.begin(), n.end(), table) == n.end()) n.push_back(table);
    }
    return n;
  }();
  return names;
}

// The key's row, or nullptr for a parameter of a command trial's own (any_key: the recipe has a
// [trial] command). Such a parameter lies outside the key table's tables, so that a typo of a
// trial key ("optimizer.lrr") is still refused, and {key} can name it.
const worker::KeySpec* swept_key(const std::string& key, const std::string& source, int line, bool any_key) {
  const worker::KeySpec* k = worker::find_key(key);
  if (k && k->scope() != worker::KeyScope::trial)
    throw ConfigError(source, line, key, "cannot sweep a [sweep] setting; sweep trial keys");
  if (k) return k;
  const std::string table = key.substr(0, key.find('.'));
  const auto& reserved = reserved_tables();
  if (!any_key || std::find(reserved.begin(), reserved.end(), table) != reserved.end())
    throw ConfigError(source, line, key, "cannot sweep an unknown key" + hint(key));
  bool plain = !key.empty();
  for (char c : key)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  if (!plain)
    throw ConfigError(source, line, key,
                      "a command's parameter is named with letters, digits, '_', '.' and '-' (so that {key} can name it)");
  if (key == kRecipeDirPlaceholder)
    throw ConfigError(source, line, key, "recipe_dir is the placeholder of the recipe's directory; name the parameter otherwise");
  return nullptr;
}

// A value of a command's own parameter: one that an argument and PRECON_PARAMS can carry.
void check_free_value(const std::string& key, const toml::node& v, const std::string& source, int line) {
  if (v.is_string() || v.is_integer() || v.is_boolean()) return;
  if (const auto d = v.value_exact<double>(); d && std::isfinite(*d)) return;
  throw ConfigError(source, line, key,
                    "a command's parameter takes strings, integers, finite numbers or booleans, got " + toml_type_name(v));
}

// A value as the trial reads it: 1e-3, 0.001 and 1.0e-3 are one number.
std::string value_identity(const toml::node& v) {
  if (v.is_number()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v.value<double>().value_or(0));
    return buf;
  }
  std::ostringstream out;
  v.visit([&](auto&& x) { out << x; });
  return out.str();
}

SweepParam values_param(const std::string& key, const toml::array& values, const std::string& source, int line,
                        bool any_key) {
  const worker::KeySpec* spec = swept_key(key, source, line, any_key);
  if (values.empty()) throw ConfigError(source, line, key, "empty list of values: give at least one");
  std::map<std::string, size_t> seen;  // identity -> position in the list
  for (size_t i = 0; i < values.size(); ++i) {
    const toml::node& v = *values.get(i);
    const int at = line ? std::max(line, line_of(v)) : 0;
    if (spec) check_value(key, v, source, at);
    else check_free_value(key, v, source, at);
    const auto [first, fresh] = seen.emplace(value_identity(v), i);
    if (!fresh)
      throw ConfigError(source, at, key,
                        "value " + std::to_string(i + 1) + " repeats value " + std::to_string(first->second + 1) + " (" +
                            value_identity(v) + "): each trial would run twice; list each value once");
  }
  SweepParam p;
  p.key = key;
  p.line = line;
  p.values = values;
  return p;
}

// `step = s` of a uniform or int_uniform range (TPE proposes lo + k·s only, as Optuna's step).
void read_step(SweepParam& p, const std::string& name, const toml::node& node, const std::string& source, int line) {
  const std::string key = p.key + ".step";
  if (p.kind == SweepKind::log_uniform)
    throw ConfigError(source, line, key, "log_uniform takes no step (a log range has no even grid); use int_uniform or uniform");
  double step = 0;
  if (auto v = node.value_exact<int64_t>()) step = static_cast<double>(*v);
  else if (auto d = node.value_exact<double>(); d && p.kind == SweepKind::uniform) step = *d;
  else
    throw ConfigError(source, line, key, name + "'s step must be " +
                                             (p.kind == SweepKind::int_uniform ? "an integer" : "a number") + ", got " +
                                             toml_type_name(node));
  if (!(step > 0) || !std::isfinite(step)) throw ConfigError(source, line, key, "step must be > 0");
  const double k = (p.hi - p.lo) / step;
  if (std::abs(k - std::round(k)) > 1e-9 * std::max(1.0, k))
    throw ConfigError(source, line, key,
                      "hi - lo (" + value_identity(toml::value<double>(p.hi - p.lo)) + ") is not a multiple of step (" +
                          value_identity(node) + "): make hi = lo + k·step");
  p.step = step;
  p.step_line = line;
}

SweepParam distribution_param(const std::string& key, const toml::table& table, const std::string& source, int line,
                              bool any_key) {
  const worker::KeySpec* spec = swept_key(key, source, line, any_key);
  const std::string expected = "a distribution table has one entry: { uniform | log_uniform | int_uniform = "
                               "[lo, hi] } or { choice = [v, ...] } (tpe: uniform and int_uniform also take step = s)";
  const toml::node* step_node = table.get("step");
  if (table.size() != (step_node ? 2u : 1u)) throw ConfigError(source, line, key, expected);
  auto entry = table.begin();
  if (entry->first.str() == "step") ++entry;
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
  if (!arr) throw ConfigError(source, line, key, name + " expects an array, got " + toml_type_name(dnode));
  if (name == "choice") {
    SweepParam p = values_param(key, *arr, source, line, any_key);
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
      throw ConfigError(source, line, key, name + " bounds must be integers, got " + toml_type_name(b));
    }
    if (auto v = b.value_exact<int64_t>()) return static_cast<double>(*v);
    if (auto v = b.value_exact<double>(); v && std::isfinite(*v)) return *v;
    throw ConfigError(source, line, key, name + " bounds must be finite numbers, got " + toml_type_name(b));
  };
  if (arr->size() != 2) throw ConfigError(source, line, key, name + " expects [lo, hi]");
  p.lo = bound(0);
  p.hi = bound(1);
  if (integer ? p.lo > p.hi : p.lo >= p.hi)
    throw ConfigError(source, line, key, name + " expects [lo, hi] with lo " + (integer ? "<=" : "<") + " hi");
  if (p.kind == SweepKind::log_uniform && p.lo <= 0) throw ConfigError(source, line, key, "log_uniform needs 0 < lo");
  if (step_node) read_step(p, name, *step_node, source, line ? std::max(line, line_of(*step_node)) : 0);
  if (!spec) return p;  // a command's own parameter: a real or an integer, as drawn
  const worker::KeyType type = spec->type();
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

// One leaf of a [sweep.parameters] or [[sweep.grid]] table: a list of values or a distribution.
SweepParam leaf_param(const std::string& key, const toml::node& node, const std::string& source, bool allow_distributions,
                      bool any_key) {
  const int line = line_of(node);
  if (const toml::table* sub = node.as_table()) {
    if (!allow_distributions) {
      swept_key(key, source, line, any_key);
      throw ConfigError(source, line, key, "a [[sweep.grid]] table takes lists of values [v, ...], not distributions");
    }
    return distribution_param(key, *sub, source, line, any_key);
  }
  if (const toml::array* values = node.as_array()) return values_param(key, *values, source, line, any_key);
  swept_key(key, source, line, any_key);
  throw ConfigError(source, line, key,
                    "expected a list of values [v, ...] or a distribution table, got " + toml_type_name(node) +
                        " (a value for every trial belongs in the key's own table)");
}

// Flattens a [sweep.parameters] or [[sweep.grid]] table: quoted ("optimizer.lr") and dotted
// (optimizer.lr) keys both name a trial key; a table under a trial key is a distribution. Each
// bad entry is recorded and the others still read.
void collect(const toml::table& table, const std::string& prefix, const std::string& source, bool allow_distributions,
             bool any_key, std::vector<Located>& out, worker::ConfigIssues& issues) {
  for (auto&& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    if (const toml::table* sub = node.as_table()) {
      bool one_distribution = false;
      for (auto&& [dname, dnode] : *sub)
        one_distribution = one_distribution || std::find(kDistributions.begin(), kDistributions.end(), dname.str()) !=
                                                   kDistributions.end();
      one_distribution = one_distribution && sub->size() <= 2;
      if (!worker::find_key(key) && !one_distribution) {
        collect(*sub, key, source, allow_distributions, any_key, out, issues);
        continue;
      }
    }
    const int column = static_cast<int>(node.source().begin.column);
    // node is passed by an init-capture: clang 14 (the fuzz build) cannot capture a structured binding.
    issues.attempt([&, &node = node] { out.push_back({leaf_param(key, node, source, allow_distributions, any_key), column}); });
  }
}

std::vector<SweepParam> collect_params(const toml::table& table, const std::string& source, bool allow_distributions,
                                       bool any_key, worker::ConfigIssues& issues) {
  std::vector<Located> located;
  collect(table, "", source, allow_distributions, any_key, located, issues);
  // toml++ orders a table by key; the sweep keeps the order of the file.
  std::stable_sort(located.begin(), located.end(), [](const Located& a, const Located& b) {
    return a.param.line != b.param.line ? a.param.line < b.param.line : a.column < b.column;
  });
  std::vector<SweepParam> out;
  for (Located& l : located) out.push_back(std::move(l.param));
  return out;
}

void parse_sweep(const toml::table& sweep, const std::string& source, bool any_key, SweepConfig& out,
                 worker::ConfigIssues& issues) {
  for (auto&& [name, node] : sweep) {
    const std::string n(name.str());
    const int line = line_of(node);
    if (n == "parameters") {
      const toml::table* t = node.as_table();
      if (!t) {
        issues.add({source, line, "sweep.parameters", "expected a table, got " + toml_type_name(node)});
        continue;
      }
      out.parameters = collect_params(*t, source, true, any_key, issues);
    } else if (n == "grid") {
      const toml::array* arr = node.as_array();
      if (!arr || arr->empty() || !arr->is_array_of_tables()) {
        issues.add({source, line, "sweep.grid", "expected [[sweep.grid]] tables, got " + toml_type_name(node)});
        continue;
      }
      for (const toml::node& g : *arr) {
        const size_t before = issues.size();
        std::vector<SweepParam> grid = collect_params(*g.as_table(), source, true, any_key, issues);
        if (grid.empty() && issues.size() == before)
          issues.add({source, line_of(g), "sweep.grid", "this [[sweep.grid]] table is empty: give each one keys"});
        if (!grid.empty()) out.grids.push_back(std::move(grid));
      }
    } else if (n == "tpe" && node.is_table()) {
      for (auto&& [tname, tnode] : *node.as_table()) {
        const std::string key = "sweep.tpe." + std::string(tname.str());
        if (issues.attempt([&, &tnode = tnode] { worker::set_sweep_key(out, key, tnode, source, line_of(tnode)); }))
          out.tpe_keys.emplace_back(key, line_of(tnode));
      }
    } else if (n == "nsga2" && node.is_table()) {
      for (auto&& [tname, tnode] : *node.as_table()) {
        const std::string key = "sweep.nsga2." + std::string(tname.str());
        if (issues.attempt([&, &tnode = tnode] { worker::set_sweep_key(out, key, tnode, source, line_of(tnode)); }))
          out.nsga2_keys.emplace_back(key, line_of(tnode));
      }
    } else if (n == "early_stop" && node.is_table()) {
      for (auto&& [ename, enode] : *node.as_table()) {
        const std::string key = "sweep.early_stop." + std::string(ename.str());
        issues.attempt([&, &enode = enode] { worker::set_sweep_key(out, key, enode, source, line_of(enode)); });
      }
    } else {
      issues.attempt([&, &node = node] { worker::set_sweep_key(out, "sweep." + n, node, source, line); });
    }
  }
}

void apply_sweep_override(SweepConfig& sweep, const std::string& key, const toml::node& value, bool any_key) {
  const std::string params_prefix = "sweep.parameters.";
  if (key.rfind(params_prefix, 0) == 0) {
    const std::string k = key.substr(params_prefix.size());
    SweepParam p;
    if (const toml::table* t = value.as_table()) p = distribution_param(k, *t, "--set", 0, any_key);
    else if (const toml::array* a = value.as_array()) p = values_param(k, *a, "--set", 0, any_key);
    else throw ConfigError("--set", 0, key, "expected a list of values [v, ...] or a distribution table, got " + toml_type_name(value));
    auto it = std::find_if(sweep.parameters.begin(), sweep.parameters.end(),
                           [&](const SweepParam& q) { return q.key == k; });
    if (it != sweep.parameters.end()) *it = std::move(p);
    else sweep.parameters.push_back(std::move(p));
    return;
  }
  if (key.rfind("sweep.grid", 0) == 0)
    throw ConfigError("--set", 0, key, "[[sweep.grid]] tables cannot be set with --set; edit the recipe");
  worker::set_sweep_key(sweep, key, value, "--set", 0);
  if (key.rfind("sweep.tpe.", 0) == 0) sweep.tpe_keys.emplace_back(key, 0);
  if (key.rfind("sweep.nsga2.", 0) == 0) sweep.nsga2_keys.emplace_back(key, 0);
}

std::string where(const std::string& source, int line) {
  return line > 0 ? source + ":" + std::to_string(line) : "--set";
}

// One key per sweep dimension: not twice in a table, not in both [sweep.parameters] and a sub-grid.
void check_sweep_keys(const SweepConfig& sweep, const std::string& source, worker::ConfigIssues& issues) {
  auto report = [&](const SweepParam& p, const std::string& message) {
    issues.add({p.line ? source : "--set", p.line, p.key, message});
  };
  auto check_unique = [&](const std::vector<SweepParam>& params) {
    for (size_t i = 0; i < params.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (params[i].key == params[j].key)
          report(params[i], "duplicate key: swept twice (also at " + where(source, params[j].line) + ")");
  };
  check_unique(sweep.parameters);
  for (const auto& grid : sweep.grids) {
    check_unique(grid);
    for (const SweepParam& g : grid)
      for (const SweepParam& p : sweep.parameters)
        if (p.key == g.key)
          report(g, "swept both in a [[sweep.grid]] table and in [sweep.parameters] (" + where(source, p.line) +
                        "); a key belongs to one of them");
  }
  const SweepMethod method = sweep_method(sweep);
  if (method == SweepMethod::grid) {
    for (const SweepParam& p : sweep.parameters)
      if (p.kind != SweepKind::values)
        report(p, std::string("a distribution (") + sweep_kind_name(p.kind) +
                      ") needs sweep.method = \"random\" or \"tpe\"; a grid takes a list of values [v, ...]");
    for (const auto& grid : sweep.grids)
      for (const SweepParam& p : grid)
        if (p.kind != SweepKind::values)
          report(p, "a [[sweep.grid]] table takes lists of values [v, ...] in a grid (distributions there need "
                    "sweep.method = \"tpe\")");
  } else if ((method == SweepMethod::random || method == SweepMethod::nsga2) && !sweep.grids.empty()) {
    report(sweep.grids.front().front(),
           "[[sweep.grid]] tables need sweep.method = \"grid\" or \"tpe\"; " + sweep.method +
               " draws from [sweep.parameters]");
  }
  if (method != SweepMethod::nsga2)
    for (const auto& [key, line] : sweep.nsga2_keys)
      issues.add({line ? source : "--set", line, key,
                  "a [sweep.nsga2] key needs sweep.method = \"nsga2\" (the method is \"" + sweep.method + "\")"});
  if (method != SweepMethod::tpe)
    for (const auto& [key, line] : sweep.tpe_keys)
      issues.add({line ? source : "--set", line, key,
                  "a [sweep.tpe] key needs sweep.method = \"tpe\" (the method is \"" + sweep.method + "\")"});
  if (method != SweepMethod::tpe && method != SweepMethod::nsga2) {
    auto check_step = [&](const std::vector<SweepParam>& params) {
      for (const SweepParam& p : params)
        if (p.step > 0)
          issues.add({p.step_line ? source : "--set", p.step_line, p.key + ".step",
                      "step needs sweep.method = \"tpe\" or \"nsga2\" (the method is \"" + sweep.method + "\")"});
    };
    check_step(sweep.parameters);
    for (const auto& grid : sweep.grids) check_step(grid);
  }
}

// sweep.method = "bohb" is TPE's proposals with Hyperband's brackets: its early stopping is
// Hyperband's (set here when the recipe names none). Hyperband's brackets need min_step <= the
// longest run.
void check_early_stop(Recipe& r, const toml::table& doc, worker::ConfigIssues& issues) {
  EarlyStopConfig& es = r.sweep.early_stop;
  auto at = [&](const std::string& key) -> std::pair<std::string, int> {
    const auto v = doc.at_path(key);
    if (v && v.node()) return {r.source, line_of(*v.node())};
    return {"--set", 0};
  };
  if (r.sweep.method == "bohb") {
    if (es.method == "none") {
      es.method = "hyperband";
    } else if (es.method != "hyperband") {
      const auto [src, line] = at("sweep.early_stop.method");
      issues.add({src, line, "sweep.early_stop.method",
                  "sweep.method = \"bohb\" stops trials by Hyperband's brackets, not \"" + es.method +
                      "\": set \"hyperband\" or leave the key out (TPE with " + es.method +
                      " is sweep.method = \"tpe\")"});
    }
  }
  if (es.method != "hyperband") return;
  const bool given = es.max_step > 0;
  const int64_t longest = longest_run(r.sweep, r.base.config.train.steps);
  if (es.min_step > longest) {
    const auto [src, line] = at("sweep.early_stop.min_step");
    issues.add({src, line, "sweep.early_stop.min_step",
                "Hyperband's brackets run from min_step to " +
                    std::string(given ? "sweep.early_stop.max_step" : "the longest train.steps") + " (" + std::to_string(longest) +
                    "): min_step " + std::to_string(es.min_step) + " is past it; lower min_step" +
                    (given ? " or raise max_step" : "")});
  }
}

// objective.metrics and objective.modes: one mode per metric, no metric twice, not beside
// objective.metric/mode; several objectives only where the method can rank by a Pareto front
// (grid and random do not rank; tpe is MOTPE; nsga2) and early stopping by the pareto rule. The
// first objective becomes objective.metric/mode (the trials keep their best checkpoints by it).
void check_objectives(Recipe& r, const toml::table& doc, const std::vector<std::string>& trial_overrides,
                      worker::ConfigIssues& issues) {
  worker::ObjectiveConfig& o = r.base.config.objective;
  auto at = [&](const std::string& key) -> std::pair<std::string, int> {
    const auto v = doc.at_path(key);
    if (v && v.node()) return {r.source, line_of(*v.node())};
    return {"--set", 0};
  };
  auto given = [&](const std::string& key) {
    return doc.at_path(key).node() != nullptr ||
           std::find(trial_overrides.begin(), trial_overrides.end(), key) != trial_overrides.end();
  };
  auto add = [&](const std::string& key, const std::string& message) {
    const auto [src, line] = at(key);
    issues.add({src, line, key, message});
  };
  if (o.metrics.empty() && o.modes.empty()) return;
  const size_t before = issues.size();
  if (o.metrics.empty()) add("objective.modes", "objective.modes needs objective.metrics (one mode per metric)");
  else if (o.modes.size() != o.metrics.size())
    add("objective.modes", "objective.modes has " + std::to_string(o.modes.size()) + " mode(s) and objective.metrics " +
                               std::to_string(o.metrics.size()) + " metric(s): give one mode (\"min\" or \"max\") per metric, in its order");
  for (size_t i = 0; i < o.metrics.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (o.metrics[i] == o.metrics[j]) add("objective.metrics", "metric \"" + o.metrics[i] + "\" is listed twice");
  for (const char* single : {"objective.metric", "objective.mode"})
    if (given(single))
      add(single, std::string(single) + " and objective.metrics/modes both given: one objective is " + single +
                      ", several are objective.metrics and objective.modes");
  if (issues.size() != before) return;
  o.metric = o.metrics.front();
  o.mode = o.modes.front();
  if (o.metrics.size() < 2) return;
  const EarlyStopConfig& es = r.sweep.early_stop;
  if (r.sweep.method == "bohb")
    add("sweep.method", "sweep.method = \"bohb\" ranks by one objective (Hyperband's brackets): with several "
                        "objectives use \"tpe\" (MOTPE) or \"nsga2\", and sweep.early_stop.method = \"pareto\"");
  else if (es.method == "asha" || es.method == "hyperband" || es.method == "median")
    add("sweep.early_stop.method", es.method + " ranks trials by one objective: with several objectives use \"pareto\" "
                                   "(a trial stops when sweep.early_stop.min_dominating completed trials dominate it) "
                                   "or \"none\"");
  // (Called before the early-stop metric/mode default to the objective's: set means given.)
  for (const char* key : {"sweep.early_stop.metric", "sweep.early_stop.mode"})
    if (!(std::string(key) == "sweep.early_stop.metric" ? es.metric : es.mode).empty())
      add(key, std::string(key) + " names one objective: with objective.metrics the early stopping judges them all");
  if (r.study.present)
    add("objective.metrics", "a [study] ranks its trials by one objective: give objective.metric");
}

// A command's placeholders name swept keys (or {recipe_dir}); a [study]'s trials are precon-train's.
void check_command(const Recipe& r, worker::ConfigIssues& issues) {
  const std::string& src = r.command.line > 0 ? r.source : std::string("--set");
  if (r.study.present) {
    issues.add({src, r.command.line, "trial.command",
                "a [study] runs precon-train: its trials cannot run a command; sweep the program's keys with [sweep]"});
    return;
  }
  std::vector<std::string> swept;
  for (const SweepParam& p : r.sweep.parameters) swept.push_back(p.key);
  for (const auto& grid : r.sweep.grids)
    for (const SweepParam& p : grid) swept.push_back(p.key);
  std::vector<std::string> names;
  if (!issues.attempt([&] { names = placeholder_names(r.command, r.source); })) return;
  for (const std::string& name : names) {
    if (name == kRecipeDirPlaceholder || std::find(swept.begin(), swept.end(), name) != swept.end()) continue;
    std::string message = "{" + name + "} names no swept parameter: a placeholder is a key of [sweep.parameters] or "
                          "[[sweep.grid]], or {recipe_dir}";
    const std::string h = worker::closest_key(name, swept);
    if (std::find(swept.begin(), swept.end(), h) != swept.end()) message += " (did you mean {" + h + "}?)";
    issues.add({src, r.command.line, "trial.command", message});
  }
}

}  // namespace

SweepMethod sweep_method(const SweepConfig& sweep) {
  constexpr worker::Choice<SweepMethod> kMethods[] = {
      {"grid", SweepMethod::grid}, {"random", SweepMethod::random}, {"tpe", SweepMethod::tpe}, {"bohb", SweepMethod::tpe},
      {"nsga2", SweepMethod::nsga2}};
  return worker::parse_choice<ConfigError>("sweep.method", sweep.method, kMethods);
}

bool proposes_trials(const SweepConfig& sweep) {
  const SweepMethod m = sweep_method(sweep);
  return m == SweepMethod::tpe || m == SweepMethod::nsga2;
}

std::vector<Objective> recipe_objectives(const worker::ObjectiveConfig& objective) {
  std::vector<Objective> out;
  if (objective.metrics.empty()) return {{objective.metric, objective.mode == "max"}};
  for (size_t i = 0; i < objective.metrics.size(); ++i)
    out.push_back({objective.metrics[i], i < objective.modes.size() && objective.modes[i] == "max"});
  return out;
}

int64_t longest_run(const SweepConfig& sweep, int64_t base_steps) {
  if (sweep.early_stop.max_step > 0) return sweep.early_stop.max_step;
  int64_t longest = base_steps;
  auto look = [&](const std::vector<SweepParam>& params) {
    for (const SweepParam& p : params) {
      if (p.key != "train.steps") continue;
      if (p.kind == SweepKind::values || p.kind == SweepKind::choice) {
        for (const toml::node& v : p.values) longest = std::max(longest, v.value<int64_t>().value_or(0));
      } else {
        longest = std::max(longest, static_cast<int64_t>(p.hi));
      }
    }
  };
  look(sweep.parameters);
  for (const auto& grid : sweep.grids) look(grid);
  return longest;
}

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
    for (const worker::KeySpec& k : worker::recipe_keys())
      if (k.scope() == worker::KeyScope::recipe) n.push_back(k.name);
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
  const toml::table doc = worker::parse_toml_text(text, source);
  worker::ConfigIssues issues;
  worker::read_trial_tables(r.base, doc, source, issues, {"sweep", "study", "trial"});
  // The command first: with one, the sweep may name parameters of the program's own.
  if (const toml::node* trial_node = doc.get("trial")) read_trial_table(*trial_node, source, r.command, issues);
  std::vector<std::string> other_overrides;
  for (const std::string& o : overrides) {
    issues.attempt([&] {
      auto [key, doc] = worker::split_override(o);
      if (key.rfind("trial.", 0) == 0) apply_trial_override(r.command, key, *doc.get("v"));
      else other_overrides.push_back(o);
    });
  }
  const bool any_key = !r.command.argv.empty();
  if (any_key) r.recipe_dir = std::filesystem::absolute(std::filesystem::path(source)).parent_path().string();
  const toml::node* sweep_node = doc.get("sweep");
  if (sweep_node) {
    if (const toml::table* t = sweep_node->as_table()) parse_sweep(*t, source, any_key, r.sweep, issues);
    else issues.add({source, line_of(*sweep_node), "sweep", "expected a table, got " + toml_type_name(*sweep_node)});
  }
  if (const toml::node* study_node = doc.get("study")) read_study(*study_node, source, r.study, issues);

  std::vector<std::string> trial_overrides;
  for (const std::string& o : other_overrides) {
    issues.attempt([&] {
      auto [key, doc] = worker::split_override(o);
      const toml::node& value = *doc.get("v");
      if (key.rfind("sweep.", 0) == 0) {
        apply_sweep_override(r.sweep, key, value, any_key);
        return;
      }
      if (key.rfind("study.", 0) == 0) {
        apply_study_override(r.study, key, value);
        return;
      }
      worker::set_key(r.base, key, value, "--set", 0);
      trial_overrides.push_back(key);
    });
  }

  SweepConfig& s = r.sweep;
  check_objectives(r, doc, trial_overrides, issues);
  if (s.early_stop.metric.empty()) s.early_stop.metric = r.base.config.objective.metric;
  if (s.early_stop.mode.empty()) s.early_stop.mode = r.base.config.objective.mode;
  check_early_stop(r, doc, issues);
  const bool swept = !s.parameters.empty() || !s.grids.empty();
  if (sweep_node && sweep_node->is_table() && !swept && !r.study.present && issues.empty())
    issues.add({source, line_of(*sweep_node), "sweep",
                "the sweep is empty: add [sweep.parameters] or [[sweep.grid]] with values, or remove [sweep] "
                "to run one trial"});
  check_sweep_keys(s, source, issues);
  for (const std::string& key : trial_overrides) {
    auto check = [&](const std::vector<SweepParam>& params) {
      for (const SweepParam& p : params)
        if (p.key == key)
          issues.add({"--set", 0, key,
                      "this key is swept (" + where(source, p.line) + "); set its values with --set "
                      "sweep.parameters." + key + "=[...] or edit the sweep"});
    };
    check(s.parameters);
    for (const auto& g : s.grids) check(g);
  }
  check_study(r, trial_overrides, issues);
  if (any_key) check_command(r, issues);
  // A sweep's or a study's trials are checked one by one when it is expanded (their values change
  // the rules).
  if (!swept && !r.study.present) worker::check_rules(r.base, issues);
  issues.throw_if_any();
  return r;
}

Recipe parse_recipe_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  worker::read_toml_file(path, &text);
  return parse_recipe_text(text, path, overrides);
}

worker::TrialConfig stored_trial_config(const std::string& config_toml, const std::string& who) {
  return parse_stored_trial(config_toml, who).config;
}

std::string recipe_key_table(worker::KeyTableFormat format) {
  std::vector<worker::KeyRow> rows = {
      {"sweep.parameters.<key>", "values | dist", "", "",
       "[v, ...] (grid: each value; random, tpe: a choice) or, random and tpe, { uniform | log_uniform | int_uniform "
       "= [lo, hi] } or { choice = [v, ...] }"},
      {"sweep.parameters.<key>.step", "number", "", "",
       "tpe: { uniform | int_uniform = [lo, hi], step = s } proposes lo + k·s only (hi - lo a multiple of s)"},
      {"sweep.grid.<key>", "values | dist", "", "",
       "[[sweep.grid]] tables: each a sub-grid of lists [v, ...] (tpe: also distributions); the sweep is their union "
       "(× [sweep.parameters]); tpe samples a table's keys only in its trials"}};
  for (worker::KeyRow& row : study_key_rows()) rows.push_back(std::move(row));
  rows.push_back(trial_command_key_row());
  return worker::format_key_table(true, rows, format);
}

}  // namespace precon::orch
