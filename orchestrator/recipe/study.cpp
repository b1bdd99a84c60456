#include "orchestrator/recipe/study.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "worker/config/keys.h"
#include "worker/model/memory_estimate.h"

namespace precon::orch {

namespace {

using worker::ConfigError;
using worker::toml_type_name;

constexpr int64_t kMaxSeeds = 1000;

int study_line(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

std::string study_number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::optional<double> study_number(const toml::node& n) {
  if (auto v = n.value_exact<int64_t>()) return static_cast<double>(*v);
  if (auto v = n.value_exact<double>(); v && std::isfinite(*v)) return *v;
  return std::nullopt;
}

// A list of positive numbers (lr_grid, tokens).
std::vector<double> positive_numbers(const std::string& key, const toml::node& value, const std::string& source,
                                     int line) {
  const toml::array* arr = value.as_array();
  if (!arr) throw ConfigError(source, line, key, "expected a list of positive numbers, got " + toml_type_name(value));
  if (arr->empty()) throw ConfigError(source, line, key, "empty list: give at least one positive number");
  std::vector<double> out;
  for (const toml::node& e : *arr) {
    const std::optional<double> v = study_number(e);
    if (!v || *v <= 0)
      throw ConfigError(source, line, key,
                        "expected positive numbers, got " + (v ? study_number_text(*v) : toml_type_name(e)));
    out.push_back(*v);
  }
  return out;
}

// The scalar [study] keys, from the recipe and from --set alike.
void set_scalar(StudyConfig& s, const std::string& key, const toml::node& value, const std::string& source, int line) {
  if (key == "study.baseline") {
    auto v = value.value_exact<std::string>();
    if (!v || v->empty()) throw ConfigError(source, line, key, "expected an arm's name (a non-empty string)");
    s.baseline = *v;
  } else if (key == "study.tokens_per_parameter") {
    const std::optional<double> v = study_number(value);
    if (!v || *v <= 0 || *v > 1e9)
      throw ConfigError(source, line, key, "expected a number of tokens per parameter above 0, e.g. 20 (Chinchilla)");
    s.tokens_per_parameter = *v;
  } else if (key == "study.tokens") {
    s.tokens = positive_numbers(key, value, source, line);
  } else if (key == "study.lr_grid") {
    std::vector<double> grid = positive_numbers(key, value, source, line);
    for (size_t i = 0; i < grid.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (grid[i] == grid[j]) throw ConfigError(source, line, key, "the factor " + study_number_text(grid[i]) + " is listed twice");
    s.lr_grid = std::move(grid);
  } else if (key == "study.lr_scale") {
    auto v = value.value_exact<std::string>();
    if (!v || (*v != "none" && *v != "width"))
      throw ConfigError(source, line, key, "expected \"none\" or \"width\" (lr ∝ 1/d_model)");
    s.lr_scale = *v == "width" ? LrScale::width : LrScale::none;
  } else if (key == "study.seeds") {
    auto v = value.value_exact<int64_t>();
    if (!v || *v < 1 || *v > kMaxSeeds)
      throw ConfigError(source, line, key, "expected an integer between 1 and " + std::to_string(kMaxSeeds));
    s.seeds = *v;
  } else {
    const std::string h = worker::closest_key(key, study_key_names());
    throw ConfigError(source, line, key, "unknown key" + (h.empty() ? std::string(" (`precon recipe keys` lists them)")
                                                                    : " (did you mean " + h + "?)"));
  }
  s.lines[key] = line;
}

// The trial keys of one size or arm table: nested and dotted keys flattened as the recipe's own
// tables are; each value checked through the key table.
void collect_keys(const toml::table& table, const std::string& prefix, const std::string& what,
                  const std::string& source, StudyEntry& entry, worker::ConfigIssues& issues) {
  for (auto&& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    if (prefix.empty() && key == "name" && what.rfind("study arm", 0) == 0) continue;  // the arm's own name
    if (const toml::table* sub = node.as_table(); sub && !worker::find_key(key)) {
      collect_keys(*sub, key, what, source, entry, issues);
      continue;
    }
    const int line = study_line(node);
    // node is passed by an init-capture: clang 14 (the fuzz build) cannot capture a structured binding.
    issues.attempt([&, &node = node] {
      try {
        worker::ParsedConfig scratch;
        worker::set_key(scratch, key, node, source, line);
      } catch (const ConfigError& e) {
        std::vector<worker::ConfigIssue> found = e.issues();
        for (worker::ConfigIssue& i : found) i.message = "in " + what + ": " + i.message;
        throw ConfigError(std::move(found));
      }
      if (key == "train.steps")
        throw ConfigError(source, line, key, "in " + what + ": a study derives train.steps from its token budget "
                                                 "(study.tokens_per_parameter or study.tokens); remove it");
      if (key == "train.seed")
        throw ConfigError(source, line, key, "in " + what + ": a study sets train.seed = [train] seed + replicate "
                                                 "(study.seeds); set the base seed in [train]");
      for (const StudyKey& k : entry.keys)
        if (k.key == key) throw ConfigError(source, line, key, "in " + what + ": set twice (also at line " + std::to_string(k.line) + ")");
      StudyKey k{key, line, static_cast<int>(node.source().begin.column), {}};
      node.visit([&](auto&& v) { k.value.push_back(v); });
      entry.keys.push_back(std::move(k));
    });
  }
}

void read_entries(const std::string& key, const toml::node& node, const std::string& source,
                  std::vector<StudyEntry>& out, worker::ConfigIssues& issues) {
  const bool arms = key == "study.arms";
  const toml::array* arr = node.as_array();
  if (!arr || !arr->is_array_of_tables()) {
    issues.add({source, study_line(node), key,
                std::string("expected [[") + key + "]] tables (" +
                    (arms ? "each an arm: recipe keys and an optional name" : "each a size: model.* keys") + "), got " +
                    toml_type_name(node)});
    return;
  }
  static const std::regex kName(R"([A-Za-z0-9][A-Za-z0-9_.+-]{0,63})");
  for (const toml::node& n : *arr) {
    const toml::table& t = *n.as_table();
    StudyEntry e;
    e.line = study_line(n);
    const size_t index = out.size();
    if (arms) {
      if (const toml::node* name = t.get("name")) {
        auto v = name->value_exact<std::string>();
        if (!v || !std::regex_match(*v, kName))
          issues.add({source, study_line(*name), "study.arms.name",
                      "expected a name of at most 64 letters, digits and . _ + - (it labels the arm's trials and "
                      "the report), got " + (v ? "\"" + v->substr(0, 80) + "\"" : toml_type_name(*name))});
        else
          e.name = *v;
      }
    }
    const std::string what =
        arms ? "study arm " + (e.name.empty() ? std::to_string(index) : "\"" + e.name + "\"") : "study size " + std::to_string(index);
    collect_keys(t, "", what, source, e, issues);
    std::stable_sort(e.keys.begin(), e.keys.end(), [](const StudyKey& a, const StudyKey& b) {
      return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    if (arms && e.name.empty()) {
      // Unnamed: its optimizer's name, else its position.
      for (const StudyKey& k : e.keys)
        if (k.key == "optimizer.name") e.name = k.value.get(0)->value_or(std::string());
      if (e.name.empty()) e.name = "arm" + std::to_string(index);
    }
    out.push_back(std::move(e));
  }
}

std::string join_names(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

// The line of a ParsedConfig origin ("file:12"); 0 for "--set".
int line_in(const std::string& origin) {
  const size_t colon = origin.rfind(':');
  int line = 0;
  if (colon != std::string::npos) std::from_chars(origin.data() + colon + 1, origin.data() + origin.size(), line);
  return line;
}

int key_line(const StudyConfig& s, const std::string& key) {
  auto it = s.lines.find(key);
  return it == s.lines.end() ? s.line : it->second;
}

}  // namespace

const std::vector<std::string>& study_key_names() {
  static const std::vector<std::string> names = {"study.baseline", "study.tokens_per_parameter", "study.tokens",
                                                 "study.lr_grid",  "study.lr_scale",             "study.seeds",
                                                 "study.sizes",    "study.arms"};
  return names;
}

std::vector<worker::KeyRow> study_key_rows() {
  return {
      {"study.baseline", "string", "", "", "the arm the others are measured against (an arm's name)"},
      {"study.tokens_per_parameter", "number", "20", "tokens",
                     "train tokens per model parameter: train.steps = ceil(tpp·N / (batch_size·seq_len)), N the "
                     "worker's parameter count of each size"},
      {"study.tokens", "number list", "[]", "tokens",
                     "instead of tokens_per_parameter: the token budget of each size, in order"},
      {"study.lr_grid", "number list", "[1.0]", "",
                     "factors around each arm's centre lr (optimizer.lr and optimizer.adamw.lr); every factor runs "
                     "with every seed and the best mean final val_loss wins its (arm, size)"},
      {"study.lr_scale", "string", "\"none\"", "",
                     "how the centre lr follows the width (none | width: × d_model of size 0 / d_model, μP-style "
                     "lr ∝ 1/d_model)"},
      {"study.seeds", "integer", "2", "", "replicates per point: train.seed = [train] seed + k"},
      {"study.sizes", "tables", "", "",
                     "[[study.sizes]]: 3 or more, smallest first; each sets model.* keys (and any trial key that "
                     "changes with size, e.g. train.batch_size)"},
      {"study.arms", "tables", "", "",
                     "[[study.arms]]: 2 or more; each sets recipe keys (e.g. optimizer = {name = \"muon\", lr = "
                     "0.02}) and an optional name (default: its optimizer.name)"}};
}

void read_study(const toml::node& node, const std::string& source, StudyConfig& out, worker::ConfigIssues& issues) {
  out.present = true;
  out.line = study_line(node);
  const toml::table* table = node.as_table();
  if (!table) {
    issues.add({source, out.line, "study", "expected a table, got " + toml_type_name(node)});
    return;
  }
  for (auto&& [name, value] : *table) {
    const std::string key = "study." + std::string(name.str());
    const int line = study_line(value);
    if (key == "study.sizes" || key == "study.arms") {
      out.lines[key] = line;
      read_entries(key, value, source, key == "study.sizes" ? out.sizes : out.arms, issues);
      continue;
    }
    issues.attempt([&, &value = value] { set_scalar(out, key, value, source, line); });
  }
}

void apply_study_override(StudyConfig& study, const std::string& key, const toml::node& value) {
  if (key == "study.sizes" || key == "study.arms" || key.rfind("study.sizes.", 0) == 0 || key.rfind("study.arms.", 0) == 0)
    throw ConfigError("--set", 0, key, "[[study.sizes]] and [[study.arms]] cannot be set with --set; edit the recipe");
  if (!study.present) throw ConfigError("--set", 0, key, "the recipe has no [study] table");
  set_scalar(study, key, value, "--set", 0);
}

void check_study(const Recipe& recipe, const std::vector<std::string>& trial_overrides, worker::ConfigIssues& issues) {
  const StudyConfig& s = recipe.study;
  if (!s.present) return;
  const std::string& src = recipe.source;
  auto add = [&](int line, const std::string& key, const std::string& message) {
    issues.add({line > 0 ? src : "--set", line, key, message});
  };
  if (!recipe.sweep.parameters.empty() || !recipe.sweep.grids.empty()) {
    const SweepParam& p = recipe.sweep.parameters.empty() ? recipe.sweep.grids.front().front() : recipe.sweep.parameters.front();
    add(s.line, "study",
        "[study] and " + std::string(recipe.sweep.parameters.empty() ? "[[sweep.grid]]" : "[sweep.parameters]") + " (" +
            (p.line ? src + ":" + std::to_string(p.line) : "--set") +
            ") do not combine: a study makes its own grid (sizes × arms × lr_grid × seeds); put the settings to "
            "compare in [[study.arms]]");
  }
  if (recipe.sweep.method != "grid")
    add(s.line, "sweep.method", "a study expands a fixed grid (sizes × arms × lr_grid × seeds); remove sweep.method = \"" +
                                    recipe.sweep.method + "\"");
  if (auto it = recipe.base.origin.find("train.steps"); it != recipe.base.origin.end())
    add(line_in(it->second), "train.steps",
        "a study derives train.steps from its token budget (study.tokens_per_parameter or study.tokens): " +
            std::string(it->second == "--set" ? "--set study.tokens_per_parameter=... instead" : "remove it"));
  if (s.sizes.size() < 3)
    add(key_line(s, "study.sizes"), "study.sizes",
        std::to_string(s.sizes.size()) + " size(s): a study needs 3 or more [[study.sizes]] (the fit has 2 parameters "
                                         "per arm besides the shared E)");
  if (s.arms.size() < 2)
    add(key_line(s, "study.arms"), "study.arms",
        std::to_string(s.arms.size()) + " arm(s): a study needs 2 or more [[study.arms]] (the baseline and one to compare)");
  std::vector<std::string> names;
  for (const StudyEntry& a : s.arms) {
    for (const StudyEntry& b : s.arms) {
      if (&b == &a) break;
      if (b.name == a.name)
        add(a.line, "study.arms", "two arms are named \"" + a.name + "\" (also at line " + std::to_string(b.line) +
                                      "): give each arm a distinct name = \"...\"");
    }
    if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  }
  if (s.baseline.empty())
    add(s.line, "study.baseline", "missing: name the arm the others are measured against (arms: " + join_names(names) + ")");
  else if (!s.arms.empty() && std::find(names.begin(), names.end(), s.baseline) == names.end())
    add(key_line(s, "study.baseline"), "study.baseline",
        "\"" + s.baseline + "\" is not an arm's name (arms: " + join_names(names) + ")");
  if (s.lines.count("study.tokens") && s.lines.count("study.tokens_per_parameter"))
    add(key_line(s, "study.tokens"), "study.tokens",
        "give study.tokens (a budget per size) or study.tokens_per_parameter, not both");
  else if (!s.tokens.empty() && s.tokens.size() != s.sizes.size())
    add(key_line(s, "study.tokens"), "study.tokens",
        std::to_string(s.tokens.size()) + " token budgets for " + std::to_string(s.sizes.size()) + " sizes: give one per size");
  // A key belongs to the sizes or to the arms: set by both, one would silently win.
  for (const StudyEntry& a : s.arms)
    for (const StudyKey& k : a.keys)
      for (size_t i = 0; i < s.sizes.size(); ++i)
        for (const StudyKey& z : s.sizes[i].keys)
          if (z.key == k.key)
            add(k.line, k.key, "set by arm \"" + a.name + "\" and by study size " + std::to_string(i) + " (line " +
                                   std::to_string(z.line) + "): a key belongs to the sizes or to the arms");
  for (const std::string& key : trial_overrides) {
    std::string by;
    for (size_t i = 0; i < s.sizes.size() && by.empty(); ++i)
      for (const StudyKey& z : s.sizes[i].keys)
        if (z.key == key) by = "study size " + std::to_string(i) + " (line " + std::to_string(z.line) + ")";
    for (const StudyEntry& a : s.arms)
      for (const StudyKey& k : a.keys)
        if (by.empty() && k.key == key) by = "arm \"" + a.name + "\" (line " + std::to_string(k.line) + ")";
    if (!by.empty()) add(0, key, "the study sets this key in " + by + "; --set cannot override it: edit the study");
  }
}

int64_t study_size(const StudyConfig& s) {
  int64_t n = 1;
  for (const int64_t k : {static_cast<int64_t>(s.sizes.size()), static_cast<int64_t>(s.arms.size()),
                          static_cast<int64_t>(s.lr_grid.size()), s.seeds}) {
    if (k == 0) return 0;
    if (n > std::numeric_limits<int64_t>::max() / k) return std::numeric_limits<int64_t>::max();
    n *= k;
  }
  return n;
}

namespace {

// The base config with one size's and one arm's keys, before the study's derived keys.
struct StudyCell {
  worker::ParsedConfig parsed;
  int64_t parameters = 0;
  bool ok = false;
};

std::string size_text(const StudyEntry& size) {
  std::string s;
  for (const StudyKey& k : size.keys) {
    const toml::node& v = *k.value.get(0);
    std::string text;
    if (auto str = v.value_exact<std::string>()) text = *str;
    else if (auto n = study_number(v)) text = study_number_text(*n);
    else text = "...";
    s += (s.empty() ? "" : " ") + k.key + "=" + text;
  }
  return s;
}

// ceil(tokens / per_step), at least 1; exact for whole numbers of tokens.
double steps_for(double tokens, double per_step) {
  if (tokens == std::floor(tokens) && tokens < 0x1p53 && per_step < 0x1p53) {
    const auto t = static_cast<int64_t>(tokens), b = static_cast<int64_t>(per_step);
    return static_cast<double>(std::max<int64_t>(1, (t + b - 1) / b));
  }
  return std::max(1.0, std::ceil(tokens / per_step));
}

void set_entry(worker::ParsedConfig& parsed, const StudyEntry& e, const std::string& source) {
  for (const StudyKey& k : e.keys) worker::set_key(parsed, k.key, *k.value.get(0), source, k.line);
}

}  // namespace

std::vector<TrialSpec> expand_study(const Recipe& recipe) {
  const StudyConfig& s = recipe.study;
  const std::string& src = recipe.source;
  const int64_t total = study_size(s);
  if (total > kMaxSweepTrials)
    throw ConfigError(src, s.line, "study",
                      "the study has " + (total == std::numeric_limits<int64_t>::max() ? std::string("too many")
                                                                                        : std::to_string(total)) +
                          " trials (sizes × arms × lr_grid × seeds), more than " + std::to_string(kMaxSweepTrials));
  worker::ConfigIssues issues;
  std::set<std::string> seen;  // one report per problem, naming the first size and arm that hit it
  auto record = [&](const ConfigError& e, const std::string& where) {
    for (worker::ConfigIssue i : e.issues()) {
      if (!seen.insert(i.source + ":" + std::to_string(i.line) + ":" + i.key + ":" + i.message).second) continue;
      i.message = "invalid combination in " + where + ": " + i.message;
      issues.add(std::move(i));
    }
  };
  // Each (size, arm) before steps, lr and seed: the model's rules, with train.steps as large as it
  // may be so that only the model's own rules can fail; then its parameter count.
  std::vector<std::vector<StudyCell>> cells(s.sizes.size(), std::vector<StudyCell>(s.arms.size()));
  for (size_t z = 0; z < s.sizes.size(); ++z) {
    for (size_t a = 0; a < s.arms.size(); ++a) {
      StudyCell& c = cells[z][a];
      const std::string where = "study size " + std::to_string(z) + " (" + size_text(s.sizes[z]) + "), arm \"" + s.arms[a].name + "\"";
      try {
        c.parsed = recipe.base;
        set_entry(c.parsed, s.sizes[z], src);
        set_entry(c.parsed, s.arms[a], src);
        worker::ParsedConfig probe = c.parsed;
        worker::set_key(probe, "train.steps", toml::value<int64_t>(1'000'000'000'000), src, s.line);
        worker::validate_config(probe);
        c.parameters = worker::estimate_memory(c.parsed.config).parameters;
        c.ok = true;
      } catch (const ConfigError& e) {
        record(e, where);
      } catch (const worker::WorkerError& e) {
        record(ConfigError(src, s.sizes[z].line, "study.sizes", e.what()), where);
      }
    }
  }
  for (size_t z = 1; z < s.sizes.size(); ++z)
    if (cells[z][0].ok && cells[z - 1][0].ok && cells[z][0].parameters <= cells[z - 1][0].parameters)
      issues.add({src, s.sizes[z].line, "study.sizes",
                  "study size " + std::to_string(z) + " has " + std::to_string(cells[z][0].parameters) +
                      " parameters, not more than size " + std::to_string(z - 1) + "'s " +
                      std::to_string(cells[z - 1][0].parameters) + ": list the sizes from smallest to largest"});
  issues.throw_if_any();

  std::vector<TrialSpec> trials;
  trials.reserve(static_cast<size_t>(total));
  const int budget_line = s.tokens.empty() ? s.lines.count("study.tokens_per_parameter") ? s.lines.at("study.tokens_per_parameter") : s.line
                                           : s.lines.at("study.tokens");
  const int lr_line = s.lines.count("study.lr_grid") ? s.lines.at("study.lr_grid") : s.line;
  for (size_t z = 0; z < s.sizes.size(); ++z) {
    for (size_t a = 0; a < s.arms.size(); ++a) {
      const StudyCell& c = cells[z][a];
      const worker::TrialConfig& cc = c.parsed.config;
      const double per_step = static_cast<double>(cc.train.batch_size) * static_cast<double>(cc.model.seq_len);
      const double tokens = s.tokens.empty() ? s.tokens_per_parameter * static_cast<double>(c.parameters) : s.tokens[z];
      const double steps = steps_for(tokens, per_step);
      // lr ∝ 1/d_model from the smallest size's centre (μP's rule for AdamW's hidden matrices).
      const double width = s.lr_scale == LrScale::width ? static_cast<double>(cells[0][a].parsed.config.model.d_model) /
                                                              static_cast<double>(cc.model.d_model)
                                                        : 1.0;
      for (double factor : s.lr_grid) {
        for (int64_t k = 0; k < s.seeds; ++k) {
          TrialSpec t;
          t.index = static_cast<int64_t>(trials.size());
          t.params = {{kStudyArmParam, s.arms[a].name},
                      {kStudySizeParam, static_cast<int64_t>(z)},
                      {kStudyLrFactorParam, factor},
                      {kStudySeedParam, k}};
          t.label = "study.size=" + std::to_string(z) + " study.arm=" + s.arms[a].name +
                    " study.lr_factor=" + study_number_text(factor) + " study.seed=" + std::to_string(k);
          const std::string where = "study size " + std::to_string(z) + " (" + size_text(s.sizes[z]) + "), arm \"" +
                                    s.arms[a].name + "\", lr factor " + study_number_text(factor);
          worker::ParsedConfig p = c.parsed;
          try {
            worker::set_key(p, "train.steps", toml::value<int64_t>(static_cast<int64_t>(std::min(steps, 9e18))), src,
                            budget_line);
            worker::set_key(p, "optimizer.lr", toml::value<double>(cc.optimizer.lr * factor * width), src, lr_line);
            if (cc.optimizer.adamw.lr > 0)
              worker::set_key(p, "optimizer.adamw.lr", toml::value<double>(cc.optimizer.adamw.lr * factor * width), src,
                              lr_line);
            worker::set_key(p, "train.seed", toml::value<int64_t>(cc.train.seed + k), src, s.line);
            worker::validate_config(p);
          } catch (const ConfigError& e) {
            record(e, where);
            continue;
          }
          t.config = std::move(p.config);
          t.config_toml = worker::config_to_toml(t.config);
          trials.push_back(std::move(t));
        }
      }
    }
  }
  issues.throw_if_any();
  return trials;
}

}  // namespace precon::orch
