#include "worker/config/parse.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "worker/config/keys.h"

namespace precon::worker {

namespace {

std::string location(const std::string& source, int line) {
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

std::string expected_text(const KeySpec& k) {
  std::string s = key_type_name(k.type());
  if (!k.choices.empty()) {
    s = "one of";
    for (size_t i = 0; i < k.choices.size(); ++i) s += (i ? ", \"" : " \"") + k.choices[i] + "\"";
  }
  return s;
}

std::string range_text(const KeySpec& k) {
  std::ostringstream s;
  if (std::isfinite(k.min) && std::isfinite(k.max)) s << "between " << k.min << " and " << k.max;
  else if (std::isfinite(k.min)) s << ">= " << k.min;
  else s << "<= " << k.max;
  return s.str();
}

void check_range(const KeySpec& k, double v, const std::string& source, int line) {
  if (v < k.min || v > k.max || std::isnan(v)) {
    std::ostringstream msg;
    msg << "value " << v << " is out of range: expected " << range_text(k);
    throw ConfigError(source, line, k.name, msg.str());
  }
}

// Walks a table, setting every leaf key; nested tables extend the dotted prefix.
void walk(ParsedConfig& parsed, const toml::table& table, const std::string& prefix, const std::string& source,
          const ParseOptions& options) {
  for (const auto& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const int line = static_cast<int>(node.source().begin.line);
    if (prefix.empty()) {
      bool skipped = false;
      for (const std::string& t : options.skip_tables) skipped |= (t == name.str());
      if (skipped) continue;
    }
    if (const toml::table* sub = node.as_table()) {
      walk(parsed, *sub, key, source, options);
      continue;
    }
    set_key(parsed, key, node, source, line);
  }
}

}  // namespace

ConfigError::ConfigError(const std::string& source, int line, const std::string& key, const std::string& message)
    : std::runtime_error(location(source, line) + ": " + (key.empty() ? "" : key + ": ") + message),
      source_(source), line_(line), key_(key) {}

void set_key(ParsedConfig& parsed, const std::string& key, const toml::node& value, const std::string& source,
             int line) {
  const KeySpec* k = find_key(key);
  if (!k) {
    std::string hint = closest_key(key);
    throw ConfigError(source, line, key,
                      "unknown key" + (hint.empty() ? std::string(" (`precon-train keys` lists them)")
                                                    : " (did you mean " + hint + "?)"));
  }
  FieldRef ref = k->field(parsed.config);
  auto wrong_type = [&](const std::string& got) {
    throw ConfigError(source, line, key, "expected " + expected_text(*k) + ", got " + got);
  };
  auto type_of = [](const toml::node& n) -> std::string {
    switch (n.type()) {
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a number";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::array: return "an array";
      case toml::node_type::table: return "a table";
      default: return "a date/time";
    }
  };
  if (auto p = std::get_if<int64_t*>(&ref)) {
    if (auto v = value.value_exact<int64_t>()) {
      check_range(*k, static_cast<double>(*v), source, line);
      **p = *v;
    } else if (auto d = value.value_exact<double>(); d && std::floor(*d) == *d && std::fabs(*d) < 9e15) {
      check_range(*k, *d, source, line);
      **p = static_cast<int64_t>(*d);
    } else {
      wrong_type(type_of(value));
    }
  } else if (auto p = std::get_if<double*>(&ref)) {
    std::optional<double> v = value.is_integer() ? std::optional<double>(double(*value.value_exact<int64_t>()))
                                                 : value.value_exact<double>();
    if (!v) wrong_type(type_of(value));
    check_range(*k, *v, source, line);
    **p = *v;
  } else if (auto p = std::get_if<bool*>(&ref)) {
    auto v = value.value_exact<bool>();
    if (!v) wrong_type(type_of(value));
    **p = *v;
  } else if (auto p = std::get_if<std::string*>(&ref)) {
    auto v = value.value_exact<std::string>();
    if (!v) wrong_type(type_of(value));
    if (!k->choices.empty() && std::find(k->choices.begin(), k->choices.end(), *v) == k->choices.end())
      throw ConfigError(source, line, key, "\"" + *v + "\" is not " + expected_text(*k));
    **p = *v;
  } else if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    const toml::array* arr = value.as_array();
    if (!arr) wrong_type(type_of(value));
    std::vector<std::string> out;
    for (const toml::node& e : *arr) {
      auto s = e.value_exact<std::string>();
      if (!s) throw ConfigError(source, line, key, "expected an array of strings, found " + type_of(e));
      out.push_back(*s);
    }
    **p = out;
  } else {
    auto& list = *std::get<std::vector<std::array<double, 3>>*>(ref);
    const toml::array* arr = value.as_array();
    if (!arr) throw ConfigError(source, line, key, "expected an array of [a, b, c] tuples");
    if (arr->empty()) {  // no explicit list: what config_to_toml writes for the named sets
      list.clear();
      parsed.origin[key] = location(source, line);
      return;
    }
    std::vector<std::array<double, 3>> out;
    for (const toml::node& e : *arr) {
      const toml::array* t = e.as_array();
      if (!t || t->size() != 3) throw ConfigError(source, line, key, "each entry must be a tuple [a, b, c]");
      std::array<double, 3> abc{};
      for (size_t i = 0; i < 3; ++i) {
        const toml::node& x = *t->get(i);
        std::optional<double> v = x.is_integer() ? std::optional<double>(double(*x.value_exact<int64_t>()))
                                                 : x.value_exact<double>();
        if (!v || !std::isfinite(*v)) throw ConfigError(source, line, key, "coefficients must be finite numbers");
        abc[i] = *v;
      }
      out.push_back(abc);
    }
    list = out;
    if (!out.empty()) parsed.config.optimizer.muon.coefficients = "explicit";
  }
  parsed.origin[key] = location(source, line);
}

void apply_override(ParsedConfig& parsed, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set", 0, "", "expected key=value, got \"" + assignment + "\"");
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  toml::table doc;
  try {
    doc = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    doc = toml::table{{"v", text}};  // a bare word: take it as a string
  }
  set_key(parsed, key, *doc.get("v"), "--set", 0);
}

ParsedConfig parse_config_text(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides, const ParseOptions& options) {
  ParsedConfig parsed;
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(source, static_cast<int>(e.source().begin.line), "",
                      "TOML syntax error: " + std::string(e.description()));
  }
  walk(parsed, doc, "", source, options);
  for (const std::string& o : overrides) apply_override(parsed, o);
  validate_config(parsed);
  return parsed;
}

ParsedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides,
                               const ParseOptions& options) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path, 0, "", "cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config_text(ss.str(), path, overrides, options);
}

void validate_config(const ParsedConfig& parsed) {
  const TrialConfig& c = parsed.config;
  auto fail = [&](const std::string& key, const std::string& message) {
    auto it = parsed.origin.find(key);
    std::string where = it == parsed.origin.end() ? "config" : it->second;
    throw ConfigError(where, 0, key, message);
  };
  if (c.model.d_model % c.model.n_head != 0)
    fail("model.n_head", "n_head = " + std::to_string(c.model.n_head) + " must divide d_model = " +
                             std::to_string(c.model.d_model));
  if (c.optimizer.muon.coefficients == "explicit" && c.optimizer.muon.coefficient_list.empty())
    fail("optimizer.muon.coefficients", "\"explicit\" needs optimizer.muon.coefficient_list = [[a, b, c], ...]");
  if (c.train.precision == "bf16" && c.train.device != "cuda")
    fail("train.precision", "bf16 compute needs train.device = \"cuda\"; the CPU path is fp32");
  if (c.model.n_head % c.parallel.tensor != 0)
    fail("parallel.tensor", "tensor = " + std::to_string(c.parallel.tensor) + " must divide n_head = " +
                                std::to_string(c.model.n_head));
  if (c.optimizer.shampoo.start_preconditioning_step != 0 &&
      c.optimizer.shampoo.start_preconditioning_step < 1)
    fail("optimizer.shampoo.start_preconditioning_step", "must be >= 1 (or 0 for precondition_frequency)");
  // A default warm-up longer than a short run just means the run warms up throughout.
  if (c.optimizer.warmup_steps > c.train.steps && parsed.origin.count("optimizer.warmup_steps"))
    fail("optimizer.warmup_steps", "warm-up of " + std::to_string(c.optimizer.warmup_steps) +
                                       " steps is longer than train.steps = " + std::to_string(c.train.steps));
}

std::string config_to_toml(const TrialConfig& config) {
  std::ostringstream out;
  std::string table;
  for (const KeySpec& k : trial_keys()) {
    const size_t dot = k.name.rfind('.');
    const std::string t = k.name.substr(0, dot);
    if (t != table) {
      out << (table.empty() ? "" : "\n") << "[" << t << "]\n";
      table = t;
    }
    out << k.name.substr(dot + 1) << " = " << value_text(config, k) << "\n";
  }
  return out.str();
}

}  // namespace precon::worker
