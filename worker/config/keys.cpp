#include "worker/config/keys.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "worker/config/key_rows.h"

namespace precon::worker {

namespace {

#define T(path) [](TrialConfig& c) { return FieldRef{&c.path}; }
#define S(path) [](SweepSettings& s) { return FieldRef{&s.path}; }

// Printable text of bounded length: names end up in logs, tables, paths and job names.
const std::string kPrintable = R"([^\x00-\x1f\x7f]{1,100})";
const std::string kPrintableText = "1 to 100 characters, no control characters";

std::vector<KeySpec> build_table() {
  using key_rows::Row, key_rows::trial, key_rows::sweep;
  std::vector<Row> k;
  // [experiment]
  k.push_back(trial("experiment.name", "", "experiment name", T(experiment.name)).pattern(kPrintable, kPrintableText));
  k.push_back(trial("experiment.description", "", "free-text description", T(experiment.description)));
  key_rows::add_model_rows(k);
  key_rows::add_data_and_train_rows(k);
  key_rows::add_optimizer_rows(k);
  key_rows::add_parallel_rows(k);
  key_rows::add_resources_rows(k);
  // [objective]
  k.push_back(trial("objective.metric", "", "metric that ranks trials", T(objective.metric))
                  .pattern(R"([A-Za-z_][A-Za-z0-9_./-]{0,99})", "a metric name: letters, digits and _./-"));
  k.push_back(trial("objective.mode", "", "better is min or max", T(objective.mode)).choices({"min", "max"}));
  k.push_back(trial("objective.metrics", "", "several objectives (a Pareto front), instead of objective.metric",
                    T(objective.metrics))
                  .pattern(R"([A-Za-z_][A-Za-z0-9_./-]{0,99})", "a metric name: letters, digits and _./-"));
  k.push_back(trial("objective.modes", "", "with objective.metrics: min or max for each, in its order", T(objective.modes))
                  .choices({"min", "max"}));
  // [sweep]: read by the controller; the swept values are [sweep.parameters] and [[sweep.grid]].
  k.push_back(sweep("sweep.method", "", "grid: every combination; random: `samples` draws; tpe: `samples` trials, each "
                    "proposed from the ones before; bohb: tpe with Hyperband early stopping; nsga2: `samples` trials "
                    "bred by the genetic algorithm NSGA-II", S(method))
                  .choices({"grid", "random", "tpe", "bohb", "nsga2"}));
  k.push_back(sweep("sweep.samples", "trials", "random, tpe, nsga2: trials run", S(samples)).range(1, 100000));
  k.push_back(sweep("sweep.seed", "", "random, tpe, nsga2: seed of the draws (same seed, same trials)", S(seed)).range(0, 9.2e18));
  k.push_back(sweep("sweep.max_concurrent", "trials", "trials running at once", S(max_concurrent)).range(1, 1e6));
  k.push_back(sweep("sweep.max_attempts", "launches", "launches per trial; a retry resumes from the last checkpoint",
                    S(max_attempts)).range(1, 1000));
  k.push_back(sweep("sweep.early_stop.method", "", "early stopping of trials behind the others", S(early_stop.method))
                  .choices({"asha", "hyperband", "median", "pareto", "none"}));
  k.push_back(sweep("sweep.early_stop.metric", "", "metric judged; \"\" = objective.metric", S(early_stop.metric)));
  k.push_back(sweep("sweep.early_stop.mode", "", "better is min or max; \"\" = objective.mode", S(early_stop.mode))
                  .choices({"min", "max"}));
  k.push_back(sweep("sweep.early_stop.min_step", "steps", "asha, hyperband: first rung; median: no stopping before this step",
                    S(early_stop.min_step)).range(1, 1e12));
  k.push_back(sweep("sweep.early_stop.reduction_factor", "", "asha, hyperband: rungs at min_step·factor^k, 1/factor promoted",
                    S(early_stop.reduction_factor)).range(2, 1000));
  k.push_back(sweep("sweep.early_stop.min_early_stopping_rate", "", "asha: rung offset s (first rung at min_step·factor^s)",
                    S(early_stop.min_early_stopping_rate)).range(0, 100));
  k.push_back(sweep("sweep.early_stop.max_step", "steps", "hyperband: the longest run, brackets over min_step..max_step; "
                    "0 = the trials' train.steps", S(early_stop.max_step)).range(0, 1e12));
  k.push_back(sweep("sweep.early_stop.n_startup_trials", "trials", "median: trials that report before any is stopped",
                    S(early_stop.n_startup_trials)).range(0, 1e6));
  k.push_back(sweep("sweep.early_stop.interval", "steps", "median: steps between checks; 0 = every reported step",
                    S(early_stop.interval)).range(0, 1e12));
  k.push_back(sweep("sweep.early_stop.min_dominating", "trials", "pareto: a trial stops when this many completed trials' "
                    "objectives at the same step all dominate its own", S(early_stop.min_dominating)).range(1, 1e6));
  k.push_back(sweep("sweep.tpe.n_startup_trials", "trials", "tpe: trials drawn at random before the estimator proposes",
                    S(tpe.n_startup_trials)).range(0, 100000));
  k.push_back(sweep("sweep.tpe.n_ei_candidates", "", "tpe: candidates drawn from l(x); the best l(x)/g(x) runs",
                    S(tpe.n_ei_candidates)).range(1, 10000));
  k.push_back(sweep("sweep.tpe.multivariate", "", "tpe: one joint estimator over the keys (false: one per key)",
                    S(tpe.multivariate)));
  k.push_back(sweep("sweep.tpe.constant_liar", "", "tpe: running trials count as the worst, so parallel proposals differ",
                    S(tpe.constant_liar)));
  k.push_back(sweep("sweep.tpe.prior_weight", "", "tpe: weight of the prior kernel (the whole range)", S(tpe.prior_weight))
                  .range(1e-6, 1e6));
  k.push_back(sweep("sweep.tpe.consider_endpoints", "", "tpe, univariate: the range's ends count as neighbours for bandwidths",
                    S(tpe.consider_endpoints)));
  k.push_back(sweep("sweep.nsga2.population_size", "trials", "nsga2: trials per generation (the first drawn at random)",
                    S(nsga2.population_size)).range(2, 100000));
  k.push_back(sweep("sweep.nsga2.mutation_prob", "", "nsga2: chance a key is drawn anew; 0 = 1/(number of keys)",
                    S(nsga2.mutation_prob)).range(0, 1));
  k.push_back(sweep("sweep.nsga2.crossover_prob", "", "nsga2: chance a child crosses two parents (else copies one)",
                    S(nsga2.crossover_prob)).range(0, 1));
  k.push_back(sweep("sweep.nsga2.swapping_prob", "", "nsga2: uniform crossover, chance each key is swapped between the parents",
                    S(nsga2.swapping_prob)).range(0, 1));
  std::vector<KeySpec> out;
  for (Row& r : k) out.push_back(std::move(r.k));
  return out;
}

#undef T
#undef S

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Significant digits of the shortest text that reads back as v (std::to_chars finds it without
// trial and error): no %g precision below it can read back the same.
int shortest_digits(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string digits;
  for (const char* c = buf; c < r.ptr && *c != 'e'; ++c)
    if (*c >= '0' && *c <= '9') digits += *c;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 1;
  const size_t last = digits.find_last_not_of('0');
  return static_cast<int>(last - first + 1);
}

std::string number_text(double v) {
  // Shortest %g text that reads back the same (the text checkpoints and stored configs already
  // hold), searched from the shortest possible precision up: usually found at the first try.
  char buf[64];
  int prec = std::isfinite(v) ? std::max(1, shortest_digits(v)) : 17;
  for (; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;  // not stod: it throws for subnormal values
  }
  if (prec == 17) std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a TOML float
  return s;
}

std::string ref_text(const FieldRef& ref) {
  if (auto p = std::get_if<int64_t*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<double*>(&ref)) return number_text(**p);
  if (auto p = std::get_if<bool*>(&ref)) return **p ? "true" : "false";
  if (auto p = std::get_if<std::string*>(&ref)) return toml_quoted(**p);
  if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    std::string s = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) {
      if (i) s += ", ";
      s += toml_quoted((**p)[i]);
    }
    return s + "]";
  }
  if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    std::string s = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) {
      if (i) s += ", ";  // appended apart: GCC 12 warns (-Wrestrict) on ", " + to_string
      s += std::to_string((**p)[i]);
    }
    return s + "]";
  }
  if (auto p = std::get_if<std::vector<DataSource>*>(&ref)) {
    const std::vector<DataSource>& sources = **p;
    if (sources.empty()) return "\"\"";
    if (sources.size() == 1 && sources[0].weight == 1.0) return toml_quoted(sources[0].path);
    std::string s = "[";
    for (size_t i = 0; i < sources.size(); ++i) {
      s += i ? ", {path = " : "{path = ";
      s += toml_quoted(sources[i].path);
      s += ", weight = ";
      s += number_text(sources[i].weight);
      s += "}";
    }
    return s + "]";
  }
  auto& list = *std::get<std::vector<std::array<double, 3>>*>(ref);
  std::string s = "[";
  for (size_t i = 0; i < list.size(); ++i) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict) on "[" + number_text(...).
    s += i ? ", [" : "[";
    s += number_text(list[i][0]);
    s += ", ";
    s += number_text(list[i][1]);
    s += ", ";
    s += number_text(list[i][2]);
    s += "]";
  }
  return s + "]";
}

}  // namespace

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::boolean: return "boolean";
    case KeyType::string: return "string";
    case KeyType::string_list: return "string list";
    case KeyType::coefficient_list: return "[[a,b,c],...]";
    case KeyType::integer_list: return "integer list";
    case KeyType::data_sources: return "path or [{path, weight}, ...]";
  }
  return "?";
}

std::string toml_quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

KeyType KeySpec::type() const {
  if (field) {
    TrialConfig probe;
    return static_cast<KeyType>(field(probe).index());
  }
  SweepSettings probe;
  return static_cast<KeyType>(sweep_field(probe).index());
}

std::string KeySpec::expected_text() const {
  if (choices.empty()) return key_type_name(type());
  std::string s = "one of";
  for (size_t i = 0; i < choices.size(); ++i) {
    s += i ? ", \"" : " \"";
    s += choices[i] + "\"";
  }
  return s;
}

std::string number_shown(double v) {
  // Below 2^63 (9.22e18) the cast is exact for an integral double; the table's largest bound is 9.2e18.
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.22e18) return std::to_string(static_cast<int64_t>(v));
  std::string s = number_text(v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

std::string KeySpec::range_text() const {
  if (std::isfinite(min) && std::isfinite(max)) return "between " + number_shown(min) + " and " + number_shown(max);
  if (std::isfinite(min)) return ">= " + number_shown(min);
  return "<= " + number_shown(max);
}

std::string value_text(const TrialConfig& config, const KeySpec& key) {
  TrialConfig copy = config;
  return ref_text(key.field(copy));
}

std::string value_text(const SweepSettings& sweep, const KeySpec& key) {
  SweepSettings copy = sweep;
  return ref_text(key.sweep_field(copy));
}

std::string KeySpec::default_text() const {
  return field ? value_text(TrialConfig{}, *this) : value_text(SweepSettings{}, *this);
}

const std::vector<KeySpec>& recipe_keys() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const std::vector<const KeySpec*>& trial_keys() {
  static const std::vector<const KeySpec*> rows = [] {
    std::vector<const KeySpec*> out;
    for (const KeySpec& k : recipe_keys())
      if (k.scope() == KeyScope::trial) out.push_back(&k);
    return out;
  }();
  return rows;
}

const KeySpec* find_key(std::string_view name) {
  for (const KeySpec& k : recipe_keys())
    if (k.name == name) return &k;
  return nullptr;
}

std::string closest_key(std::string_view name, const std::vector<std::string>& extra) {
  const size_t limit = std::max<size_t>(2, name.size() / 4);
  // The distance is at least the difference in length: candidates that cannot come within the
  // limit are skipped before the quadratic comparison (a recipe may hold a hostile, megabyte-long
  // key; without this its suggestion took seconds of the controller's time per key).
  const auto too_far = [&](std::string_view candidate) {
    return (name.size() > candidate.size() ? name.size() - candidate.size() : candidate.size() - name.size()) > limit;
  };
  std::string best;
  size_t best_d = std::string::npos;
  auto consider = [&](const std::string& candidate) {
    size_t d = too_far(candidate) ? std::string::npos : edit_distance(name, candidate);
    // Also match on the last component alone ("ns_step" -> "optimizer.muon.ns_steps").
    size_t dot = candidate.rfind('.');
    if (dot != std::string::npos && name.find('.') == std::string_view::npos) {
      const std::string_view last = std::string_view(candidate).substr(dot + 1);
      if (!too_far(last)) d = std::min(d, edit_distance(name, last));
    }
    if (d < best_d) {
      best_d = d;
      best = candidate;
    }
  };
  for (const KeySpec& k : recipe_keys()) consider(k.name);
  for (const std::string& e : extra) consider(e);
  return best_d <= limit ? best : "";
}

namespace {

std::string text_row(const KeyRow& row) {
  char line[1024];
  std::snprintf(line, sizeof line, "%-44s %-14s %-18s %-10s %s", row.name.c_str(), row.type.c_str(), row.def.c_str(),
                row.unit.c_str(), row.description.c_str());
  return line;
}

// A table cell: `|` escaped so it does not end the cell; code spans for names and defaults.
std::string cell(const std::string& text, bool code) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  if (!code || out.empty()) return out;
  return out.find('`') == std::string::npos ? "`" + out + "`" : "`` " + out + " ``";
}

std::string markdown_table(const std::vector<KeyRow>& rows) {
  std::ostringstream out;
  out << "<!-- Generated by `precon recipe keys --format markdown > docs/keys.md`; do not edit by hand.\n"
         "     ctest docs_keys fails when this file differs from what the build prints. -->\n"
         "# Recipe keys\n\n"
         "Every key a recipe accepts, with its type, default, unit and meaning, generated from the one key\n"
         "table that the recipe parser, `precon recipe check` and `precon-train --config` use. The trial keys\n"
         "(`experiment` to `resources`) make up each trial's `config.toml`; the `sweep`, `objective`, `study`\n"
         "and `trial` keys are read by the controller only. How recipes and sweeps are written:\n"
         "[recipes.md](recipes.md).\n";
  // One table per top-level name, in the order the tables first appear.
  std::vector<std::string> sections;
  for (const KeyRow& row : rows) {
    const std::string top = row.name.substr(0, row.name.find('.'));
    if (std::find(sections.begin(), sections.end(), top) == sections.end()) sections.push_back(top);
  }
  for (const std::string& section : sections) {
    out << "\n## " << section << "\n\n| Key | Type | Default | Unit | Description |\n|---|---|---|---|---|\n";
    for (const KeyRow& row : rows) {
      if (row.name.substr(0, row.name.find('.')) != section) continue;
      out << "| " << cell(row.name, true) << " | " << cell(row.type, false) << " | " << cell(row.def, true) << " | "
          << cell(row.unit, false) << " | " << cell(row.description, false) << " |\n";
    }
  }
  return out.str();
}

}  // namespace

std::string format_key_table(bool with_recipe_keys, const std::vector<KeyRow>& extra_rows, KeyTableFormat format) {
  std::vector<KeyRow> rows;
  for (const KeySpec& k : recipe_keys()) {
    if (k.scope() == KeyScope::recipe && !with_recipe_keys) continue;
    std::string desc = k.description;
    if (!k.choices.empty()) {
      desc += " (";
      for (size_t i = 0; i < k.choices.size(); ++i) {
        if (i) desc += " | ";  // appended apart: GCC 12 warns (-Wrestrict) on (i ? " | " : "") + string
        desc += k.choices[i];
      }
      desc += ")";
    }
    rows.push_back({k.name, key_type_name(k.type()), k.default_text(), k.unit, desc});
  }
  rows.insert(rows.end(), extra_rows.begin(), extra_rows.end());
  if (format == KeyTableFormat::markdown) return markdown_table(rows);
  std::ostringstream out;
  out << text_row({"key", "type", "default", "unit", "description"}) << "\n";
  for (const KeyRow& row : rows) out << text_row(row) << "\n";
  return out.str();
}

}  // namespace precon::worker
