// Parsing a trial configuration from TOML (toml++) through the key table, with errors that name
// the file, the line, the key, what was expected and the closest known key for a typo.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "worker/config/config.h"

namespace precon::worker {

class ConfigError : public std::runtime_error {
 public:
  // source: a file name or "--set"; line 0 when unknown.
  ConfigError(const std::string& source, int line, const std::string& key, const std::string& message);
  const std::string& source() const { return source_; }
  int line() const { return line_; }
  const std::string& key() const { return key_; }

 private:
  std::string source_;
  int line_;
  std::string key_;
};

struct ParsedConfig {
  TrialConfig config;
  std::map<std::string, std::string> origin;  // key -> "file:line" or "--set" where it was given
};

struct ParseOptions {
  std::vector<std::string> skip_tables;  // top-level tables parsed by the caller, e.g. "sweep"
  std::vector<std::string> extra_keys;   // the caller's own keys, for typo hints
};

ParsedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides = {},
                               const ParseOptions& options = {});
ParsedConfig parse_config_text(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides = {}, const ParseOptions& options = {});

// Sets one key from a TOML value, type- and range-checked. Does not run cross-key validation.
void set_key(ParsedConfig& parsed, const std::string& key, const toml::node& value, const std::string& source,
             int line);
// "key=value" where value is TOML (bare words are taken as strings): the `--set` syntax.
void apply_override(ParsedConfig& parsed, const std::string& assignment);
// Checks that involve several keys (n_head divides d_model, bf16 needs CUDA, ...).
void validate_config(const ParsedConfig& parsed);

// The whole config as TOML with every key (the resolved config a trial stores).
std::string config_to_toml(const TrialConfig& config);

}  // namespace precon::worker
