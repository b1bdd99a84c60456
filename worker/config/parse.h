// Parsing a trial configuration from TOML (toml++) through the one key table, with errors that
// name the file, the line, the key, what was expected and the closest known key for a typo. A
// parse reports every problem it finds (in line order, up to kMaxConfigIssues), not only the
// first, so a user fixes a file in one pass.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "worker/common/error.h"
#include "worker/config/config.h"
#include "worker/config/keys.h"

namespace precon::worker {

// One problem in a configuration: where (file or "--set", line 0 when unknown), which key, what.
struct ConfigIssue {
  std::string source;
  int line = 0;
  std::string key;
  std::string message;
  std::string text() const;  // "file:line: key: message"
};

constexpr size_t kMaxConfigIssues = 20;

// Thrown for a bad configuration: one issue or several. what() is one line per issue.
class ConfigError : public WorkerError {
 public:
  // source: a file name or "--set"; line 0 when unknown.
  ConfigError(const std::string& source, int line, const std::string& key, const std::string& message);
  explicit ConfigError(std::vector<ConfigIssue> issues, size_t more = 0);
  // The first issue's fields.
  const std::string& source() const { return issues_.front().source; }
  int line() const { return issues_.front().line; }
  const std::string& key() const { return issues_.front().key; }
  const std::vector<ConfigIssue>& issues() const { return issues_; }

 private:
  std::vector<ConfigIssue> issues_;
};

// Collects the issues of one parse; throw_if_any() sorts them by source and line (files before
// --set) and throws one ConfigError with the first kMaxConfigIssues.
class ConfigIssues {
 public:
  void add_all(const ConfigError& e);
  void add(ConfigIssue issue);
  // Runs f, recording a ConfigError it throws instead of passing it on. True if f succeeded.
  template <class F>
  bool attempt(F&& f) {
    try {
      f();
      return true;
    } catch (const ConfigError& e) {
      add_all(e);
      return false;
    }
  }
  bool empty() const { return issues_.empty(); }
  size_t size() const { return issues_.size(); }
  bool has_key(const std::string& key) const;
  void throw_if_any();

 private:
  std::vector<ConfigIssue> issues_;
};

struct ParsedConfig {
  TrialConfig config;
  std::map<std::string, std::string> origin;  // key -> "file:line" or "--set" where it was given
};

// Sets one key from a TOML value, type-, range-, choice- and pattern-checked. Trial keys only;
// does not run cross-key rules.
void set_key(ParsedConfig& parsed, const std::string& key, const toml::node& value, const std::string& source,
             int line);
// The same for a [sweep] key (KeyScope::recipe).
void set_sweep_key(SweepSettings& sweep, const std::string& key, const toml::node& value, const std::string& source,
                   int line);
// "key=value" where value is TOML (bare words are taken as strings): the `--set` syntax.
std::pair<std::string, toml::table> split_override(const std::string& assignment);
void apply_override(ParsedConfig& parsed, const std::string& assignment);

// Walks the trial tables of a TOML document, setting every leaf key and recording each problem.
// `skip` names top-level tables the caller parses itself ("sweep").
void read_trial_tables(ParsedConfig& parsed, const toml::table& doc, const std::string& source, ConfigIssues& issues,
                       const std::vector<std::string>& skip = {});

// Every key's cross-key rule (n_head divides d_model, bf16 needs CUDA, ...), each failure
// recorded at the line where its key was given. Keys that already have an issue are skipped.
void check_rules(const ParsedConfig& parsed, ConfigIssues& issues);
// Checks the values a config holds (ranges, choices, patterns, then rules) for every trial key
// whose name starts with `prefix`: for configs built in code rather than parsed.
void check_values(const TrialConfig& config, const std::string& prefix, const std::string& source,
                  ConfigIssues& issues);
// The same, throwing a ConfigError with every failure: the one validation a trial config gets at
// `recipe check`, at submit, and in the trainer.
void validate_config(const ParsedConfig& parsed);

ParsedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides = {});
ParsedConfig parse_config_text(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides = {});
// The TOML document of a file, or a ConfigError (unreadable, too large, a directory, bad TOML).
toml::table read_toml_file(const std::string& path, std::string* text = nullptr);
toml::table parse_toml_text(const std::string& text, const std::string& source);

// "a string", "an integer", ...: a TOML value's kind, for "expected X, got Y" messages.
std::string toml_type_name(const toml::node& n);

// The whole config as TOML with every trial key (the resolved config a trial stores and runs).
std::string config_to_toml(const TrialConfig& config);

}  // namespace precon::worker
