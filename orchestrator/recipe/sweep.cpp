#include "orchestrator/recipe/sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <tuple>

#include "orchestrator/recipe/rng.h"
#include "orchestrator/recipe/tpe_sweep.h"
#include "worker/config/choice.h"
#include "worker/config/keys.h"
#include "worker/config/parse.h"
#include "worker/data/prepare.h"
#include "worker/model/memory_estimate.h"

namespace precon::orch {

namespace {

// Why a data path cannot be read as a file: " does not exist", or what it is instead (a device
// such as /dev/zero would never end, a FIFO would block).
std::string not_a_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return " does not exist";
  using std::filesystem::file_type;
  const file_type t = st.type();
  const char* kind = t == file_type::directory   ? "a directory"
                     : t == file_type::character ? "a character device"
                     : t == file_type::block     ? "a block device"
                     : t == file_type::fifo      ? "a FIFO"
                     : t == file_type::socket    ? "a socket"
                                                 : "not a file";
  return std::string(" is not a regular file (it is ") + kind + "): give a token file";
}

using worker::ConfigError;
using worker::ConfigIssue;

// "; VERB ..." naming the trials of `users` (nothing when the recipe has one trial).
std::string trials_text(const std::vector<TrialSpec>& trials, const std::vector<const TrialSpec*>& users,
                        const std::string& verb) {
  if (trials.size() <= 1) return std::string();
  if (users.size() == trials.size()) return "; " + verb + " all " + std::to_string(trials.size()) + " trials";
  std::string text = "; " + verb + " ";
  const size_t shown = std::min<size_t>(users.size(), 3);
  for (size_t i = 0; i < shown; ++i)
    text += (i ? ", " : "") + std::string("trial ") + std::to_string(users[i]->index) + " (" + users[i]->label + ")";
  if (users.size() > shown) text += " and " + std::to_string(users.size() - shown) + " more";
  return text;
}

using Pick = SweepPick;

std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back the same
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

void describe(const worker::FieldRef& ref, nlohmann::json& value, std::string& text) {
  if (auto p = std::get_if<int64_t*>(&ref)) {
    value = **p;
    text = std::to_string(**p);
  } else if (auto p = std::get_if<double*>(&ref)) {
    value = **p;
    text = number_text(**p);
  } else if (auto p = std::get_if<bool*>(&ref)) {
    value = **p;
    text = **p ? "true" : "false";
  } else if (auto p = std::get_if<std::string*>(&ref)) {
    value = **p;
    text = **p;
  } else if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    value = **p;
    text = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) text += (i ? "," : "") + (**p)[i];
    text += "]";
  } else if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    value = **p;
    text = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) text += (i ? "," : "") + std::to_string((**p)[i]);
    text += "]";
  } else if (auto p = std::get_if<std::vector<worker::DataSource>*>(&ref)) {
    value = nlohmann::json::array();
    text.clear();
    for (const worker::DataSource& d : **p) {
      value.push_back({{"path", d.path}, {"weight", d.weight}});
      if (!text.empty()) text += ",";
      text += d.path;
      if ((*p)->size() > 1) text += ":" + number_text(d.weight);
    }
  } else {
    const auto& list = *std::get<std::vector<std::array<double, 3>>*>(ref);
    value = nlohmann::json::array();
    text = "[";
    for (size_t i = 0; i < list.size(); ++i) {
      value.push_back({list[i][0], list[i][1], list[i][2]});
      text += std::string(i ? "," : "") + "[" + number_text(list[i][0]) + "," + number_text(list[i][1]) + "," +
              number_text(list[i][2]) + "]";
    }
    text += "]";
  }
}

// A command's own parameter (no key of the table): its value as drawn or listed.
void describe_own(const Pick& pick, nlohmann::json& value, std::string& text) {
  if (!pick.node) {
    if (pick.param->kind == SweepKind::int_uniform) value = pick.integer;
    else value = pick.real;
  } else if (auto s = pick.node->value_exact<std::string>()) {
    value = *s;
  } else if (auto i = pick.node->value_exact<int64_t>()) {
    value = *i;
  } else if (auto b = pick.node->value_exact<bool>()) {
    value = *b;
  } else {
    value = pick.node->value<double>().value_or(0.0);
  }
  text = placeholder_text(value);
}

}  // namespace

TrialSpec make_sweep_trial(const Recipe& recipe, int64_t index, const std::vector<Pick>& picks) {
  worker::ParsedConfig parsed = recipe.base;
  TrialSpec trial;
  trial.index = index;
  trial.params = nlohmann::json::object();
  for (const Pick& pick : picks) {
    const SweepParam& p = *pick.param;
    const std::string& source = p.line > 0 ? recipe.source : std::string("--set");
    if (!worker::find_key(p.key)) continue;  // a command's own parameter: no trial key to set
    if (pick.node) {
      worker::set_key(parsed, p.key, *pick.node, source, p.line);
    } else if (p.kind == SweepKind::int_uniform) {
      worker::set_key(parsed, p.key, toml::value<int64_t>(pick.integer), source, p.line);
    } else {
      worker::set_key(parsed, p.key, toml::value<double>(pick.real), source, p.line);
    }
  }
  // Values as the config holds them (a listed 5 for a real key reads back as 5.0).
  for (const Pick& pick : picks) {
    nlohmann::json value;
    std::string text;
    if (const worker::KeySpec* k = worker::find_key(pick.param->key)) describe(k->field(parsed.config), value, text);
    else describe_own(pick, value, text);
    trial.params[pick.param->key] = std::move(value);
    trial.label += (trial.label.empty() ? "" : " ") + pick.param->key + "=" + text;
  }
  try {
    worker::validate_config(parsed);
  } catch (const ConfigError& e) {
    // Each broken rule at the line of its key, naming the trial's values.
    const std::string which = trial.label.empty() ? "the base config" : "sweep trial " + std::to_string(index) + " (" + trial.label + ")";
    std::vector<worker::ConfigIssue> issues = e.issues();
    for (worker::ConfigIssue& i : issues) i.message = "invalid combination in " + which + ": " + i.message;
    throw ConfigError(std::move(issues));
  }
  trial.config = std::move(parsed.config);
  trial.config_toml = worker::config_to_toml(trial.config);
  if (!recipe.command.argv.empty()) {
    try {
      trial.command = resolve_command(recipe.command, trial.params, recipe.recipe_dir, recipe.source);
    } catch (const ConfigError& e) {
      const ConfigIssue& i = e.issues().front();
      throw ConfigError(i.source, i.line, i.key, "sweep trial " + std::to_string(index) + " (" + trial.label + "): " + i.message);
    }
    trial.config_toml += trial_table_toml(trial.command, trial.params);
  }
  return trial;
}

namespace {

// The sub-grids of a grid sweep, each a list of dimensions (slowest first).
std::vector<std::vector<const SweepParam*>> sub_grids(const SweepConfig& sweep) {
  std::vector<std::vector<const SweepParam*>> out;
  std::vector<const SweepParam*> common;
  for (const SweepParam& p : sweep.parameters) common.push_back(&p);
  if (sweep.grids.empty()) {
    out.push_back(common);
    return out;
  }
  for (const auto& grid : sweep.grids) {
    std::vector<const SweepParam*> dims = common;
    for (const SweepParam& p : grid) dims.push_back(&p);
    out.push_back(dims);
  }
  return out;
}

int64_t grid_size(const std::vector<const SweepParam*>& dims) {
  int64_t n = 1;
  for (const SweepParam* p : dims) {
    const auto k = static_cast<int64_t>(p->values.size());
    if (n > std::numeric_limits<int64_t>::max() / k) return std::numeric_limits<int64_t>::max();
    n *= k;
  }
  return n;
}

Pick draw(const SweepParam& p, Rng& rng) {
  Pick pick{&p, nullptr, 0.0, 0};
  switch (p.kind) {
    case SweepKind::values:
    case SweepKind::choice:
      pick.node = p.values.get(static_cast<size_t>(rng.below(p.values.size())));
      break;
    case SweepKind::uniform:
      pick.real = std::clamp(p.lo + rng.uniform01() * (p.hi - p.lo), p.lo, p.hi);
      break;
    case SweepKind::log_uniform: {
      const double a = std::log(p.lo), b = std::log(p.hi);
      pick.real = std::clamp(std::exp(a + rng.uniform01() * (b - a)), p.lo, p.hi);
      break;
    }
    case SweepKind::int_uniform: {
      const auto lo = static_cast<int64_t>(p.lo), hi = static_cast<int64_t>(p.hi);
      const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;  // 0 = all 2^64
      pick.integer = static_cast<int64_t>(static_cast<uint64_t>(lo) + rng.below(span));
      break;
    }
  }
  return pick;
}

}  // namespace

int64_t sweep_size(const Recipe& recipe) {
  if (recipe.study.present) return study_size(recipe.study);
  const SweepConfig& sweep = recipe.sweep;
  if (sweep.parameters.empty() && sweep.grids.empty()) return 1;
  if (sweep_method(sweep) != SweepMethod::grid) return sweep.samples;
  int64_t total = 0;
  for (const auto& dims : sub_grids(sweep)) {
    const int64_t n = grid_size(dims);
    if (n > std::numeric_limits<int64_t>::max() - total) return std::numeric_limits<int64_t>::max();
    total += n;
  }
  return total;
}

namespace {

// The one cap, from the recipe's numbers alone: nothing is expanded or reserved before it.
void check_sweep_size(const Recipe& recipe) {
  const SweepConfig& sweep = recipe.sweep;
  const int64_t total = sweep_size(recipe);
  if (total <= kMaxSweepTrials) return;
  const std::string count = total == std::numeric_limits<int64_t>::max() ? std::string("too many") : std::to_string(total);
  if (sweep_method(sweep) != SweepMethod::grid) {
    // Only reachable when the key table's range for sweep.samples is wider than the cap.
    throw ConfigError(recipe.source, 0, "sweep.samples",
                      "asks for " + count + " trials, more than " + std::to_string(kMaxSweepTrials) +
                          " (the most one experiment holds); split the search into several experiments");
  }
  const SweepParam& first = sweep.parameters.empty() ? sweep.grids.front().front() : sweep.parameters.front();
  throw ConfigError(first.line ? recipe.source : "--set", first.line, "sweep",
                    "the grid has " + count + " trials, more than " + std::to_string(kMaxSweepTrials) +
                        "; use sweep.method = \"random\" with sweep.samples, or fewer values");
}

}  // namespace

std::vector<TrialSpec> expand_sweep(const Recipe& recipe) {
  if (recipe.study.present) return expand_study(recipe);
  const SweepConfig& sweep = recipe.sweep;
  std::vector<TrialSpec> trials;
  worker::ConfigIssues issues;
  // Every trial is made; the ones that break a rule are reported together at the end.
  auto add_trial = [&](int64_t index, const std::vector<Pick>& picks) {
    issues.attempt([&] { trials.push_back(make_sweep_trial(recipe, index, picks)); });
  };
  if (sweep.parameters.empty() && sweep.grids.empty()) {
    add_trial(0, {});
    issues.throw_if_any();
    return trials;
  }
  check_sweep_size(recipe);
  if (proposes_trials(sweep)) return {propose_sweep_trial(recipe, 0, {})};
  if (sweep_method(sweep) == SweepMethod::random) {
    Rng rng(static_cast<uint64_t>(sweep.seed));
    trials.reserve(static_cast<size_t>(sweep.samples));
    std::vector<Pick> picks;
    for (int64_t i = 0; i < sweep.samples; ++i) {
      picks.clear();
      for (const SweepParam& p : sweep.parameters) picks.push_back(draw(p, rng));
      add_trial(i, picks);
    }
    issues.throw_if_any();
    return trials;
  }
  const int64_t total = sweep_size(recipe);
  trials.reserve(static_cast<size_t>(total));
  int64_t index = 0;
  for (const auto& dims : sub_grids(sweep)) {
    std::vector<size_t> at(dims.size(), 0);
    std::vector<Pick> picks(dims.size());
    for (bool more = true; more;) {
      for (size_t d = 0; d < dims.size(); ++d) picks[d] = Pick{dims[d], dims[d]->values.get(at[d]), 0.0, 0};
      add_trial(index++, picks);
      // Odometer: the last key turns fastest.
      more = false;
      for (size_t d = dims.size(); d-- > 0;) {
        if (++at[d] < dims[d]->values.size()) {
          more = true;
          break;
        }
        at[d] = 0;
      }
    }
  }
  issues.throw_if_any();
  return trials;
}

std::vector<std::string> check_recipe_data(const std::vector<TrialSpec>& trials) {
  struct Use {
    std::string key;
    std::string path;
    std::vector<const TrialSpec*> trials;
  };
  std::vector<Use> uses;
  std::map<std::pair<std::string, std::string>, size_t> index;
  auto add = [&](const std::string& key, std::string path, const TrialSpec& t) {
    path.erase(0, path.find_first_not_of(" \t"));
    path.erase(path.find_last_not_of(" \t") + 1);
    if (path.empty()) return;
    auto [it, inserted] = index.emplace(std::make_pair(key, path), uses.size());
    if (inserted) uses.push_back({key, path, {}});
    std::vector<const TrialSpec*>& users = uses[it->second].trials;
    if (users.empty() || users.back() != &t) users.push_back(&t);
  };
  auto add_sources = [&](const char* key, const std::vector<worker::DataSource>& sources, const TrialSpec& t) {
    for (const worker::DataSource& src : sources) {
      for (size_t start = 0;;) {
        const size_t comma = src.path.find(',', start);
        add(key, src.path.substr(start, comma == std::string::npos ? std::string::npos : comma - start), t);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
  };
  for (const TrialSpec& t : trials) {
    if (!t.command.empty()) continue;  // a program of the user's reads what it reads
    add_sources("data.train", t.config.data.train, t);
    add_sources("data.val", t.config.data.val, t);
    add("train.init_from", t.config.train.init_from, t);
  }
  auto users_text = [&](const std::vector<const TrialSpec*>& users) { return trials_text(trials, users, "used by"); };
  std::vector<std::string> missing;
  std::map<std::string, bool> exists;
  // Token files: each (path, seq_len, vocab_size, format) the trials read it with is checked once.
  std::map<std::tuple<std::string, int64_t, int64_t, std::string>, std::string> checked;
  for (const Use& u : uses) {
    auto [it, inserted] = exists.emplace(u.path, false);
    if (inserted) {
      std::error_code ec;
      it->second = u.key == "train.init_from" ? std::filesystem::is_regular_file(u.path, ec)
                                              : worker::data_path_exists(u.path);
    }
    if (!it->second) {
      missing.push_back(u.path + " (" + u.key + ")" + not_a_file(u.path) + users_text(u.trials));
      continue;
    }
    if (u.key == "train.init_from") continue;
    std::map<std::string, std::vector<const TrialSpec*>> problems;  // problem -> the trials it hits
    for (const TrialSpec* t : u.trials) {
      const worker::TrialConfig& c = t->config;
      const auto key = std::make_tuple(u.path, c.model.seq_len, c.model.vocab_size, c.data.format);
      auto found = checked.find(key);
      if (found == checked.end())
        found = checked.emplace(key, worker::check_data_path(u.path, c.data.format, c.model.seq_len, c.model.vocab_size))
                    .first;
      if (!found->second.empty()) problems[found->second].push_back(t);
    }
    for (const auto& [problem, users] : problems) missing.push_back(problem + " (" + u.key + ")" + users_text(users));
  }
  return missing;
}

double machine_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  double kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit)
    if (name == "MemTotal:") return kib * 1024;
  return 0;
}

namespace {
std::string pipeline_layers_text(const worker::ParallelConfig& p) {
  std::string text;
  for (int64_t n : p.pipeline_layers) text += std::to_string(n) + ",";
  return text;
}
}  // namespace

std::vector<std::string> check_recipe_memory(const std::vector<TrialSpec>& trials, double machine_bytes) {
  // Trials that differ only in what the estimate does not read share one computation.
  std::map<std::string, std::string> verdicts;
  std::map<std::string, std::vector<const TrialSpec*>> hits;  // problem -> its trials, in order
  std::vector<std::string> order;
  for (const TrialSpec& t : trials) {
    if (!t.command.empty()) continue;  // not precon-train's model
    const worker::TrialConfig& c = t.config;
    const worker::ModelConfig& m = c.model;
    const std::string key = m.arch + " " + std::to_string(m.n_layer) + " " + std::to_string(m.d_model) + " " +
                            std::to_string(m.n_head) + " " + std::to_string(m.kv_heads()) + " " + std::to_string(m.ffn()) +
                            " " + std::to_string(m.vocab_size) + " " + std::to_string(m.seq_len) + " " +
                            std::to_string(m.tie_embeddings) + " " + std::to_string(m.moe.experts) + " " +
                            std::to_string(m.expert_ffn()) + " " + std::to_string(m.moe.shared_experts) + " " +
                            std::to_string(m.moe.first_dense_layers) + " " + std::to_string(m.mla.kv_lora_rank) + " " +
                            std::to_string(m.mla.q_lora_rank) + " " + std::to_string(m.mla.qk_nope_head_dim) + " " +
                            std::to_string(m.mla.qk_rope_head_dim) + " " + std::to_string(m.mla.v_head_dim) + " " +
                            c.optimizer.name + " " +
                            std::to_string(c.optimizer.shampoo.max_preconditioner_dim) + " " + c.train.precision + " " +
                            std::to_string(c.parallel.tensor) + " " + std::to_string(c.parallel.data) + " " +
                            std::to_string(c.parallel.pipeline) + " " + c.resources.executor + " " +
                            std::to_string(c.resources.ntasks_per_node) + " " + c.resources.mem + " " +
                            std::to_string(m.moe.top_k) + " " + std::to_string(c.train.batch_size) + " " +
                            std::to_string(c.train.micro_batch_size) + " " + std::to_string(c.parallel.virtual_stages) +
                            " " + std::to_string(c.parallel.expert) + " " + std::to_string(c.optimizer.qk_clip_threshold > 0) +
                            " " + std::to_string(c.parallel.pipeline_layers.size()) + ":" + pipeline_layers_text(c.parallel);
    auto found = verdicts.find(key);
    if (found == verdicts.end()) {
      std::string verdict;
      const double limit = worker::memory_limit_bytes(c.resources.mem);
      constexpr worker::Choice<bool> kLocal[] = {{"local", true}, {"slurm", false}};  // resources.executor
      const bool local = worker::parse_choice<ConfigError>("resources.executor", c.resources.executor, kLocal);
      const double have = limit > 0 ? limit : local ? machine_bytes : 0;
      if (have > 0) {
        const worker::MemoryEstimate e = worker::estimate_memory(c);
        if (e.bytes_per_node > have)
          verdict = "the model's parameters, gradients, " + c.optimizer.name + " state and activations need " +
                    worker::bytes_text(e.bytes_per_node) + " per node (" + std::to_string(e.parameters) +
                    " parameters; per rank " + worker::estimate_text(e) + "), more than " +
                    (limit > 0 ? "resources.mem = " + c.resources.mem : "this machine's " + worker::bytes_text(have)) +
                    ": shrink the model, train.micro_batch_size or model.seq_len, or spread it with parallel.tensor / "
                    "parallel.pipeline";
      }
      found = verdicts.emplace(key, verdict).first;
    }
    if (found->second.empty()) continue;
    auto [it, inserted] = hits.emplace(found->second, std::vector<const TrialSpec*>{});
    if (inserted) order.push_back(found->second);
    it->second.push_back(&t);
  }
  std::vector<std::string> problems;
  for (const std::string& p : order) problems.push_back(p + trials_text(trials, hits[p], "in"));
  return problems;
}

}  // namespace precon::orch
