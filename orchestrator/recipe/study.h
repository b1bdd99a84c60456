// A recipe's [study] (docs/design.md, Study): a ladder of model sizes × optimizer arms × learning-rate
// factors × seeds, expanded into ordinary trials, so that the compute multiplier of each arm against
// a baseline can be fitted (orchestrator/study/report.h). The [study] keys are parsed here, not
// by the worker's key table (they are never part of a trial's config); each trial key an arm or a
// size sets goes through that table as any recipe key does. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "worker/config/parse.h"

namespace precon::orch {

struct Recipe;
struct TrialSpec;

// One trial key an arm or a size sets.
struct StudyKey {
  std::string key;    // dotted trial key, e.g. "model.d_model"
  int line = 0;       // its line in the recipe
  int column = 0;     // and column (toml++ orders a table by key; the study keeps the file's order)
  toml::array value;  // one element: the value as written
};

// One [[study.sizes]] or [[study.arms]] table.
struct StudyEntry {
  std::string name;  // arms: `name`, else its optimizer.name, else "arm<i>"; sizes: ""
  int line = 0;      // the line of its table
  std::vector<StudyKey> keys;  // in file order
};

// How each arm's learning rates follow the model's width.
enum class LrScale {
  none,   // the same centre lr at every size
  width,  // centre × d_model(size 0) / d_model: lr ∝ 1/d_model (μP's rule for AdamW's hidden matrices)
};

struct StudyConfig {
  bool present = false;                     // the recipe has a [study] table
  int line = 0;                             // where [study] starts
  std::map<std::string, int> lines;         // study.<key> -> its line (0: --set)
  std::string baseline;                     // an arm's name
  double tokens_per_parameter = 20;         // train tokens per model parameter, when `tokens` is empty
  std::vector<double> tokens;               // an explicit token budget per size
  std::vector<double> lr_grid = {1.0};      // factors around each arm's centre lr
  LrScale lr_scale = LrScale::none;
  int64_t seeds = 2;                        // replicates: train.seed = base seed + k
  std::vector<StudyEntry> sizes;            // smallest first
  std::vector<StudyEntry> arms;
};

// The params keys a study trial stores (TrialSpec::params, the store's params_json), by which the
// report finds its cell.
inline constexpr const char* kStudyArmParam = "study.arm";            // the arm's name
inline constexpr const char* kStudySizeParam = "study.size";          // index into study.sizes
inline constexpr const char* kStudyLrFactorParam = "study.lr_factor"; // the lr_grid factor
inline constexpr const char* kStudySeedParam = "study.seed";          // replicate k (train.seed = base + k)

// Reads the [study] table into `out`, recording every problem (file, line, key) in `issues`;
// the checks across keys wait for check_study.
void read_study(const toml::node& node, const std::string& source, StudyConfig& out, worker::ConfigIssues& issues);
// Applies --set study.<key>=value for the scalar keys (baseline, tokens_per_parameter, tokens,
// lr_grid, lr_scale, seeds); sizes and arms are edited in the recipe. Throws ConfigError.
void apply_study_override(StudyConfig& study, const std::string& key, const toml::node& value);
// The checks across keys once the recipe is read: counts, the baseline, names, tokens against
// sizes, keys set by both an arm and a size, keys the study derives, [sweep] values beside it,
// --set of a key the study sets.
void check_study(const Recipe& recipe, const std::vector<std::string>& trial_overrides, worker::ConfigIssues& issues);

// The trials of a study, in grid order: size (slowest), arm, lr factor, seed (fastest). Each trial
// is the base config with its size's keys, its arm's keys, train.steps from the token budget
// (ceil(tokens / (batch_size * seq_len)), tokens = tokens_per_parameter × the worker's parameter
// count, or study.tokens[size]), optimizer.lr and optimizer.adamw.lr times the factor (and the
// width rule), and train.seed + k; validated by the worker's rules. Throws ConfigError naming the
// size and the arm of a trial that breaks a rule (each problem once), or sizes not listed smallest
// first.
std::vector<TrialSpec> expand_study(const Recipe& recipe);
// The number of trials expand_study makes (saturates at INT64_MAX).
int64_t study_size(const StudyConfig& study);

// The [study] keys (study.baseline, ...), for hints; and their rows for `precon recipe keys`.
const std::vector<std::string>& study_key_names();
std::vector<worker::KeyRow> study_key_rows();

}  // namespace precon::orch
