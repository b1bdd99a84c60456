#include "orchestrator/recipe/command.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "worker/config/keys.h"

namespace precon::orch {

namespace {

using worker::ConfigError;

constexpr const char* kKey = "trial.command";

int command_line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

void set_command(TrialCommand& out, const toml::node& value, const std::string& source, int line) {
  const toml::array* list = value.as_array();
  if (!list)
    throw ConfigError(source, line, kKey,
                      "expected a list of strings [\"program\", \"arg\", ...], got " + worker::toml_type_name(value));
  if (list->empty())
    throw ConfigError(source, line, kKey,
                      "an empty command runs nothing: give the program and its arguments, or remove [trial] to run "
                      "precon-train");
  if (list->size() > kMaxCommandArgs)
    throw ConfigError(source, line, kKey,
                      std::to_string(list->size()) + " arguments, more than " + std::to_string(kMaxCommandArgs) +
                          ": pass the program a file instead");
  std::vector<std::string> argv;
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::node& a = *list->get(i);
    const std::optional<std::string> s = a.value_exact<std::string>();
    if (!s)
      throw ConfigError(source, line, kKey,
                        "argument " + std::to_string(i + 1) + " is " + worker::toml_type_name(a) +
                            ", not a string: quote it (\"3\", or \"{key}\" for a parameter's value)");
    if (s->find('\0') != std::string::npos)
      throw ConfigError(source, line, kKey, "argument " + std::to_string(i + 1) + " holds a NUL byte");
    argv.push_back(*s);
  }
  if (argv.front().empty()) throw ConfigError(source, line, kKey, "the program (argument 1) is empty");
  out.argv = std::move(argv);
  out.line = line;
}

bool placeholder_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

// One argument in pieces: literal text and placeholder names, as str.format reads "{x}", "{{", "}}".
struct Piece {
  bool placeholder = false;
  std::string text;  // the literal text, or the placeholder's name
};

std::vector<Piece> split_placeholders(const std::string& arg, size_t index, const std::string& source, int line) {
  const std::string where = "argument " + std::to_string(index + 1) + " (\"" + arg + "\"): ";
  std::vector<Piece> pieces(1);
  for (size_t i = 0; i < arg.size(); ++i) {
    const char c = arg[i];
    if ((c == '{' || c == '}') && i + 1 < arg.size() && arg[i + 1] == c) {
      pieces.back().text += c;
      ++i;
      continue;
    }
    if (c == '}')
      throw ConfigError(source, line, kKey, where + "a '}' closes no placeholder; write }} for a literal brace");
    if (c != '{') {
      pieces.back().text += c;
      continue;
    }
    const size_t close = arg.find('}', i + 1);
    const std::string name = close == std::string::npos ? std::string() : arg.substr(i + 1, close - i - 1);
    bool ok = !name.empty();
    for (char n : name) ok = ok && placeholder_char(n);
    if (!ok)
      throw ConfigError(source, line, kKey,
                        where + "a '{' opens no placeholder: a placeholder is {key} (letters, digits, _ . -), a "
                                "literal brace is {{");
    pieces.push_back({true, name});
    pieces.push_back({});
    i = close;
  }
  return pieces;
}

std::string shortest_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// A JSON scalar as a TOML value.
std::string toml_value(const nlohmann::json& v) {
  if (v.is_string()) return worker::toml_quoted(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    std::string t = shortest_number(d);
    if (t.find_first_of(".e") == std::string::npos) t += ".0";  // 3.0, not the integer 3
    return t;
  }
  return worker::toml_quoted(v.dump());
}

}  // namespace

void read_trial_table(const toml::node& node, const std::string& source, TrialCommand& out,
                      worker::ConfigIssues& issues) {
  const toml::table* table = node.as_table();
  if (!table) {
    issues.add({source, command_line_of(node), "trial", "expected a table, got " + worker::toml_type_name(node)});
    return;
  }
  for (auto&& [name, value] : *table) {
    const std::string key = "trial." + std::string(name.str());
    if (key != kKey) {
      issues.add({source, command_line_of(value), key, "unknown key: the [trial] table takes `command` only"});
      continue;
    }
    issues.attempt([&, &value = value] { set_command(out, value, source, command_line_of(value)); });
  }
}

void apply_trial_override(TrialCommand& command, const std::string& key, const toml::node& value) {
  if (key != kKey) throw ConfigError("--set", 0, key, "unknown key: the [trial] table takes `command` only");
  set_command(command, value, "--set", 0);
}

std::vector<std::string> placeholder_names(const TrialCommand& command, const std::string& source) {
  std::vector<std::string> names;
  const std::string& src = command.line > 0 ? source : std::string("--set");
  for (size_t i = 0; i < command.argv.size(); ++i)
    for (const Piece& p : split_placeholders(command.argv[i], i, src, command.line))
      if (p.placeholder && std::find(names.begin(), names.end(), p.text) == names.end()) names.push_back(p.text);
  return names;
}

std::vector<std::string> resolve_command(const TrialCommand& command, const nlohmann::json& params,
                                         const std::string& recipe_dir, const std::string& source) {
  const std::string& src = command.line > 0 ? source : std::string("--set");
  std::vector<std::string> argv;
  size_t bytes = 0;
  for (size_t i = 0; i < command.argv.size(); ++i) {
    std::string arg;
    for (const Piece& p : split_placeholders(command.argv[i], i, src, command.line)) {
      if (!p.placeholder) {
        arg += p.text;
      } else if (params.is_object() && params.contains(p.text)) {
        arg += placeholder_text(params[p.text]);
      } else if (p.text == kRecipeDirPlaceholder) {
        arg += recipe_dir;
      } else {
        throw ConfigError(src, command.line, kKey,
                          "{" + p.text + "} names no parameter of this trial (a key of one [[sweep.grid]] table is "
                          "a parameter of that table's trials only)");
      }
    }
    bytes += arg.size() + 1;
    if (bytes > kMaxCommandBytes)
      throw ConfigError(src, command.line, kKey,
                        "the command is longer than " + std::to_string(kMaxCommandBytes) +
                            " bytes with the trial's values in it: pass the program a file instead");
    argv.push_back(std::move(arg));
  }
  return argv;
}

std::string placeholder_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return value.dump();
  if (value.is_number_float()) return shortest_number(value.get<double>());
  return value.dump();
}

std::string trial_table_toml(const std::vector<std::string>& command, const nlohmann::json& params) {
  std::string out = "\n[trial]\ncommand = [";
  for (size_t i = 0; i < command.size(); ++i) out += (i ? ", " : "") + worker::toml_quoted(command[i]);
  out += "]\n\n[trial.params]\n";
  if (params.is_object())
    for (const auto& [key, value] : params.items()) out += worker::toml_quoted(key) + " = " + toml_value(value) + "\n";
  return out;
}

StoredTrial parse_stored_trial(const std::string& config_toml, const std::string& who) {
  const toml::table doc = worker::parse_toml_text(config_toml, who);
  worker::ParsedConfig parsed;
  worker::ConfigIssues issues;
  worker::read_trial_tables(parsed, doc, who, issues, {"trial"});
  worker::check_rules(parsed, issues);
  StoredTrial out;
  if (const toml::node* node = doc.at_path("trial.command").node()) {
    TrialCommand command;
    issues.attempt([&] { set_command(command, *node, who, command_line_of(*node)); });
    out.command = std::move(command.argv);
  }
  issues.throw_if_any();
  out.config = std::move(parsed.config);
  return out;
}

worker::KeyRow trial_command_key_row() {
  return {kKey, "string list", "[]", "",
                                "the program each trial runs instead of precon-train, in its run directory: "
                                "[\"prog\", \"arg\", ...]; {key} is a swept key's value, {recipe_dir} the recipe's "
                                "directory, {{ and }} braces (docs/recipes.md)"};
}

}  // namespace precon::orch
