#include "worker/config/parse.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include "worker/config/key_depth.h"

namespace precon::worker {

namespace {

// Recipes and trial configs are a few kilobytes; anything far larger is not one.
constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

std::string location(const std::string& source, int line) {
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

// "file:12" -> ("file", 12); "--set" -> ("--set", 0).
std::pair<std::string, int> split_location(const std::string& where) {
  const size_t colon = where.rfind(':');
  if (colon != std::string::npos && colon + 1 < where.size() &&
      std::all_of(where.begin() + colon + 1, where.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return {where.substr(0, colon), std::stoi(where.substr(colon + 1))};
  return {where, 0};
}

// A user's text quoted in a message, cut to 200 bytes (at a character boundary) and "…": a
// 5,000-character name must not come back whole in every error.
std::string echoed(const std::string& text) {
  constexpr size_t kMaxEchoed = 200;
  if (text.size() <= kMaxEchoed) return text;
  size_t cut = kMaxEchoed;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "…";
}

// Whether a TOML value's text has a # outside its strings.
bool has_comment(const std::string& text) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (quote == '"' && c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      return true;
    }
  }
  return false;
}

std::string unknown_key_message(const std::string& key) {
  const std::string hint = closest_key(key, {"sweep.parameters", "sweep.grid"});
  return "unknown key" + (hint.empty() ? std::string(" (`precon recipe keys` lists them)") : " (did you mean " + hint + "?)");
}

void check_range(const KeySpec& k, double v, const std::string& source, int line) {
  if (v < k.min || v > k.max || std::isnan(v))
    throw ConfigError(source, line, k.name, "value " + number_shown(v) + " is out of range: expected " + k.range_text());
}

// An integer key's value is compared as a double (the bounds are doubles) but shown exactly.
void check_range(const KeySpec& k, int64_t v, const std::string& source, int line) {
  const auto d = static_cast<double>(v);
  if (d < k.min || d > k.max)
    throw ConfigError(source, line, k.name, "value " + std::to_string(v) + " is out of range: expected " + k.range_text());
}

// A TOML integer past 64 bits: what toml++ reports (its parse error, or a bare word for --set)
// said nothing of the key. `key` may be empty when it cannot be told.
std::string out_of_64_bits(const std::string& number, const std::string& key) {
  std::string text = echoed(number) + " is out of range for a 64-bit integer";
  if (const KeySpec* k = key.empty() ? nullptr : find_key(key); k && (std::isfinite(k->min) || std::isfinite(k->max)))
    text += ": expected " + k->range_text();
  return text;
}

bool looks_like_integer(const std::string& text) {
  static const std::regex integer(R"(\s*[+-]?([0-9][0-9_]*|0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+)\s*)");
  return std::regex_match(text, integer);
}

std::string trimmed(std::string s) {
  s.erase(0, s.find_first_not_of(" \t"));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) s = s.substr(1, s.size() - 2);
  return s;
}

// The dotted key assigned on line `line` (1-based) of a TOML text, from the last table header
// above it and the key before '=', and the value's text (up to a comment). A key in
// [sweep.parameters] or [[sweep.grid]] is already a full trial key. Empty when the line holds no
// plain `key = value`.
std::pair<std::string, std::string> assignment_on_line(const std::string& text, int line) {
  std::istringstream in(text);
  std::string row, table;
  static const std::regex header(R"(\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?)");
  for (int n = 1; std::getline(in, row); ++n) {
    std::smatch m;
    if (n < line) {
      if (std::regex_match(row, m, header)) table = m[1];
      continue;
    }
    const size_t eq = row.find('=');
    if (eq == std::string::npos) return {};
    const std::string key = trimmed(row.substr(0, eq));
    const std::string value = trimmed(row.substr(eq + 1, row.find('#', eq) - eq - 1));
    if (table.empty() || table == "sweep.parameters" || table == "sweep.grid") return {key, value};
    return {table + "." + key, value};
  }
  return {};
}

// Each key's pattern compiled once: stored configs are parsed again at every launch.
const std::regex& compiled(const std::string& pattern) {
  static std::mutex mutex;
  static std::map<std::string, std::regex> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, std::regex(pattern)).first;
  return it->second;
}

// A string value (or list entry) against the key's choices and pattern. "" means "unset" for the
// keys whose default is "" (partition, mem, ...), so it passes there.
void check_string(const KeySpec& k, const std::string& v, const std::string& source, int line, bool empty_ok) {
  if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end())
    throw ConfigError(source, line, k.name, "\"" + echoed(v) + "\" is not " + k.expected_text());
  if (k.pattern.empty() || (v.empty() && empty_ok)) return;
  if (!std::regex_match(v, compiled(k.pattern)))
    throw ConfigError(source, line, k.name, toml_quoted(echoed(v)) + " is not valid: expected " + k.pattern_text);
}

// A data key's value: a path (one dataset; "" none) or a blend [{path = "...", weight = w}, ...].
std::vector<DataSource> data_sources(const KeySpec& k, const toml::node& value, const std::string& source, int line) {
  if (auto v = value.value_exact<std::string>()) {
    if (v->empty()) return {};
    return {DataSource{*v, 1.0}};
  }
  const toml::array* arr = value.as_array();
  if (!arr)
    throw ConfigError(source, line, k.name, "expected a path or a blend [{path = \"...\", weight = w}, ...], got " +
                                                toml_type_name(value));
  if (arr->empty()) throw ConfigError(source, line, k.name, "a blend needs at least one {path, weight}");
  std::vector<DataSource> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string at = "entry " + std::to_string(i + 1) + " of the blend";
    const toml::table* t = arr->get(i)->as_table();
    if (!t) throw ConfigError(source, line, k.name, at + " must be a table {path = \"...\", weight = w}");
    DataSource d;
    for (const auto& [name, node] : *t) {
      if (name == "path") {
        auto p = node.value_exact<std::string>();
        if (!p || p->empty()) throw ConfigError(source, line, k.name, at + ": path must be a non-empty string");
        d.path = *p;
      } else if (name == "weight") {
        std::optional<double> w = node.is_integer() ? std::optional<double>(static_cast<double>(*node.value_exact<int64_t>()))
                                                    : node.value_exact<double>();
        if (!w || !std::isfinite(*w) || *w <= 0)
          throw ConfigError(source, line, k.name, at + ": weight must be a positive number");
        d.weight = *w;
      } else {
        throw ConfigError(source, line, k.name, at + " has the unknown key \"" + echoed(std::string(name.str())) +
                                                    "\" (a blend entry holds path and weight)");
      }
    }
    if (d.path.empty()) throw ConfigError(source, line, k.name, at + " has no path");
    out.push_back(std::move(d));
  }
  return out;
}

// Type-checks `value` against key `k` and stores it through `ref`; the one place values enter a
// config, for trial and [sweep] keys alike.
void assign(const KeySpec& k, FieldRef ref, const toml::node& value, const std::string& source, int line) {
  auto wrong_type = [&](const std::string& got) {
    throw ConfigError(source, line, k.name, "expected " + k.expected_text() + ", got " + got);
  };
  auto number = [](const toml::node& n) -> std::optional<double> {
    if (n.is_integer()) return static_cast<double>(*n.value_exact<int64_t>());
    return n.value_exact<double>();
  };
  if (auto p = std::get_if<int64_t*>(&ref)) {
    if (auto v = value.value_exact<int64_t>()) {
      check_range(k, *v, source, line);
      **p = *v;
    } else if (auto d = value.value_exact<double>(); d && std::floor(*d) == *d && std::fabs(*d) < 9e15) {
      check_range(k, *d, source, line);
      **p = static_cast<int64_t>(*d);
    } else {
      wrong_type(toml_type_name(value));
    }
  } else if (auto p = std::get_if<double*>(&ref)) {
    std::optional<double> v = number(value);
    if (!v) wrong_type(toml_type_name(value));
    check_range(k, *v, source, line);
    **p = *v;
  } else if (auto p = std::get_if<bool*>(&ref)) {
    auto v = value.value_exact<bool>();
    if (!v) wrong_type(toml_type_name(value));
    **p = *v;
  } else if (auto p = std::get_if<std::string*>(&ref)) {
    auto v = value.value_exact<std::string>();
    if (!v) wrong_type(toml_type_name(value));
    check_string(k, *v, source, line, k.default_text() == "\"\"");
    **p = *v;
  } else if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    const toml::array* arr = value.as_array();
    if (!arr) wrong_type(toml_type_name(value));
    std::vector<std::string> out;
    for (const toml::node& e : *arr) {
      auto s = e.value_exact<std::string>();
      if (!s) throw ConfigError(source, line, k.name, "expected an array of strings, found " + toml_type_name(e));
      check_string(k, *s, source, line, false);
      out.push_back(*s);
    }
    **p = out;
  } else if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    const toml::array* arr = value.as_array();
    if (!arr) wrong_type(toml_type_name(value));
    std::vector<int64_t> out;
    for (const toml::node& e : *arr) {
      auto v = e.value_exact<int64_t>();
      if (!v) throw ConfigError(source, line, k.name, "expected an array of integers, found " + toml_type_name(e));
      out.push_back(*v);
    }
    **p = out;
  } else if (auto p = std::get_if<std::vector<DataSource>*>(&ref)) {
    **p = data_sources(k, value, source, line);
  } else {
    auto& list = *std::get<std::vector<std::array<double, 3>>*>(ref);
    const toml::array* arr = value.as_array();
    if (!arr) throw ConfigError(source, line, k.name, "expected an array of [a, b, c] tuples");
    std::vector<std::array<double, 3>> out;
    for (const toml::node& e : *arr) {
      const toml::array* t = e.as_array();
      if (!t || t->size() != 3) throw ConfigError(source, line, k.name, "each entry must be a tuple [a, b, c]");
      std::array<double, 3> abc{};
      for (size_t i = 0; i < 3; ++i) {
        std::optional<double> v = number(*t->get(i));
        if (!v || !std::isfinite(*v)) throw ConfigError(source, line, k.name, "coefficients must be finite numbers");
        abc[i] = *v;
      }
      out.push_back(abc);
    }
    list = out;
  }
}

const KeySpec& known_key(const std::string& key, KeyScope scope, const std::string& source, int line) {
  const KeySpec* k = find_key(key);
  if (!k) throw ConfigError(source, line, echoed(key), unknown_key_message(key));
  if (k->scope() != scope) {
    throw ConfigError(source, line, k->name,
                      scope == KeyScope::trial
                          ? "a [sweep] setting belongs to a recipe (precon run / submit), not to one trial's config"
                          : "a trial key, not a [sweep] setting");
  }
  return *k;
}

void walk(ParsedConfig& parsed, const toml::table& table, const std::string& prefix, const std::string& source,
          ConfigIssues& issues, const std::vector<std::string>& skip) {
  for (const auto& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const int line = static_cast<int>(node.source().begin.line);
    if (prefix.empty() && std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    if (const toml::table* sub = node.as_table(); sub && !find_key(key)) {
      walk(parsed, *sub, key, source, issues, skip);
      continue;
    }
    // node is passed by an init-capture: clang 14 (the fuzz build) cannot capture a structured binding.
    issues.attempt([&, &node = node] { set_key(parsed, key, node, source, line); });
  }
}

}  // namespace

std::string toml_type_name(const toml::node& n) {
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

std::string ConfigIssue::text() const {
  return location(source, line) + ": " + (key.empty() ? "" : key + ": ") + message;
}

namespace {
std::string join_issues(const std::vector<ConfigIssue>& issues, size_t more) {
  std::string s;
  for (size_t i = 0; i < issues.size(); ++i) {
    if (i) s += '\n';  // appended apart: GCC 12 warns (-Wrestrict) on (i ? "\n" : "") + string
    s += issues[i].text();
  }
  if (more > 0) s += "\n... and " + std::to_string(more) + " more";
  return s;
}
}  // namespace

ConfigError::ConfigError(const std::string& source, int line, const std::string& key, const std::string& message)
    : ConfigError(std::vector<ConfigIssue>{{source, line, key, message}}) {}

ConfigError::ConfigError(std::vector<ConfigIssue> issues, size_t more)
    : WorkerError(join_issues(issues, more)), issues_(std::move(issues)) {
  if (issues_.empty()) issues_.push_back({"config", 0, "", "invalid configuration"});
}

void ConfigIssues::add_all(const ConfigError& e) {
  for (const ConfigIssue& i : e.issues()) add(i);
}

void ConfigIssues::add(ConfigIssue issue) { issues_.push_back(std::move(issue)); }

bool ConfigIssues::has_key(const std::string& key) const {
  return std::any_of(issues_.begin(), issues_.end(), [&](const ConfigIssue& i) { return i.key == key; });
}

void ConfigIssues::throw_if_any() {
  if (issues_.empty()) return;
  // Files first (in line order), then --set overrides in the order given.
  std::stable_sort(issues_.begin(), issues_.end(), [](const ConfigIssue& a, const ConfigIssue& b) {
    const bool a_set = a.source == "--set", b_set = b.source == "--set";
    if (a_set != b_set) return b_set;
    if (a_set) return false;
    if (a.source != b.source) return a.source < b.source;
    return a.line < b.line;
  });
  const size_t more = issues_.size() > kMaxConfigIssues ? issues_.size() - kMaxConfigIssues : 0;
  std::vector<ConfigIssue> shown(issues_.begin(), issues_.begin() + static_cast<long>(issues_.size() - more));
  throw ConfigError(std::move(shown), more);
}

void set_key(ParsedConfig& parsed, const std::string& key, const toml::node& value, const std::string& source,
             int line) {
  const KeySpec& k = known_key(key, KeyScope::trial, source, line);
  assign(k, k.field(parsed.config), value, source, line);
  // A non-empty explicit list is what "explicit" means; an empty one is what config_to_toml
  // writes for the named sets.
  if (key == "optimizer.muon.coefficient_list" && !parsed.config.optimizer.muon.coefficient_list.empty())
    parsed.config.optimizer.muon.coefficients = "explicit";
  parsed.origin[key] = location(source, line);
}

void set_sweep_key(SweepSettings& sweep, const std::string& key, const toml::node& value, const std::string& source,
                   int line) {
  const KeySpec& k = known_key(key, KeyScope::recipe, source, line);
  assign(k, k.sweep_field(sweep), value, source, line);
}

std::pair<std::string, toml::table> split_override(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set", 0, "", "expected key=value, got \"" + echoed(assignment) + "\"");
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  key.erase(0, key.find_first_not_of(' '));
  while (!key.empty() && key.back() == ' ') key.pop_back();
  toml::table doc;
  check_key_depth(text, "--set", false);
  // A newline or a comment would let one --set carry more TOML (a [table] and its keys), or
  // text that is silently dropped.
  const std::string only_one = "a --set value is exactly one TOML value, nothing after it";
  if (text.find_first_of("\n\r") != std::string::npos)
    throw ConfigError("--set", 0, echoed(key), only_one + " (it holds a line break)");
  try {
    doc = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    if (looks_like_integer(text)) throw ConfigError("--set", 0, echoed(key), out_of_64_bits(trimmed(text), key));
    doc = toml::table{{"v", text}};  // a bare word: take it as a string
    return {key, std::move(doc)};
  }
  if (has_comment(text)) throw ConfigError("--set", 0, echoed(key), only_one + " (it holds a # comment)");
  return {key, std::move(doc)};
}

void apply_override(ParsedConfig& parsed, const std::string& assignment) {
  auto [key, doc] = split_override(assignment);
  set_key(parsed, key, *doc.get("v"), "--set", 0);
}

void read_trial_tables(ParsedConfig& parsed, const toml::table& doc, const std::string& source, ConfigIssues& issues,
                       const std::vector<std::string>& skip) {
  walk(parsed, doc, "", source, issues, skip);
}

void check_rules(const ParsedConfig& parsed, ConfigIssues& issues) {
  const TrialConfig& c = parsed.config;
  for (const KeySpec* k : trial_keys()) {
    if (!k->rule || issues.has_key(k->name)) continue;
    const std::string problem = k->rule(c);
    if (problem.empty()) continue;
    auto it = parsed.origin.find(k->name);
    auto [source, line] = split_location(it == parsed.origin.end() ? "config" : it->second);
    issues.add({source, line, k->name, problem});
  }
}

void check_values(const TrialConfig& config, const std::string& prefix, const std::string& source,
                  ConfigIssues& issues) {
  TrialConfig copy = config;
  for (const KeySpec* k : trial_keys()) {
    if (k->name.rfind(prefix, 0) != 0) continue;
    issues.attempt([&] {
      FieldRef ref = k->field(copy);
      if (auto p = std::get_if<int64_t*>(&ref)) check_range(*k, **p, source, 0);
      else if (auto p = std::get_if<double*>(&ref)) check_range(*k, **p, source, 0);
      else if (auto p = std::get_if<std::string*>(&ref)) check_string(*k, **p, source, 0, k->default_text() == "\"\"");
      else if (auto p = std::get_if<std::vector<std::string>*>(&ref))
        for (const std::string& s : **p) check_string(*k, s, source, 0, false);
    });
    if (k->rule && !issues.has_key(k->name))
      if (std::string problem = k->rule(config); !problem.empty()) issues.add({source, 0, k->name, problem});
  }
}

void validate_config(const ParsedConfig& parsed) {
  ConfigIssues issues;
  check_rules(parsed, issues);
  issues.throw_if_any();
}

toml::table parse_toml_text(const std::string& text, const std::string& source) {
  check_key_depth(text, source);
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const int line = static_cast<int>(e.source().begin.line);
    // toml++: "Error while parsing decimal integer: '9223372036854775808' is not representable in 64 bits"
    static const std::regex too_wide(R"(.*'([^']*)' is not representable in 64 bits.*)");
    std::smatch m;
    const std::string description(e.description());
    if (std::regex_match(description, m, too_wide)) {
      const auto [key, value] = assignment_on_line(text, line);
      // toml++ drops the sign: a plain `key = -N` is quoted from the line itself.
      throw ConfigError(source, line, echoed(key), out_of_64_bits(looks_like_integer(value) ? value : m[1].str(), key));
    }
    throw ConfigError(source, line, "", "TOML syntax error: " + description);
  }
}

toml::table read_toml_file(const std::string& path, std::string* text) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw ConfigError(path, 0, "", "cannot open the file: it does not exist");
  if (std::filesystem::is_directory(status)) throw ConfigError(path, 0, "", "is a directory, not a TOML file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, "", "cannot open the file");
  std::string body;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    body.append(buf, static_cast<size_t>(in.gcount()));
    if (body.size() > kMaxConfigBytes)
      throw ConfigError(path, 0, "", "is larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB: not a recipe");
  }
  toml::table doc = parse_toml_text(body, path);
  if (text) *text = std::move(body);
  return doc;
}

ParsedConfig parse_config_text(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides) {
  toml::table doc = parse_toml_text(text, source);
  ParsedConfig parsed;
  ConfigIssues issues;
  read_trial_tables(parsed, doc, source, issues);
  for (const std::string& o : overrides) issues.attempt([&] { apply_override(parsed, o); });
  check_rules(parsed, issues);
  issues.throw_if_any();
  return parsed;
}

ParsedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  read_toml_file(path, &text);
  return parse_config_text(text, path, overrides);
}

std::string config_to_toml(const TrialConfig& config) {
  std::ostringstream out;
  std::string table;
  for (const KeySpec* k : trial_keys()) {
    const size_t dot = k->name.rfind('.');
    const std::string t = k->name.substr(0, dot);
    if (t != table) {
      out << (table.empty() ? "" : "\n") << "[" << t << "]\n";
      table = t;
    }
    out << k->name.substr(dot + 1) << " = " << value_text(config, *k) << "\n";
  }
  return out.str();
}

}  // namespace precon::worker
