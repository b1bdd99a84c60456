#include "orchestrator/service/views.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "orchestrator/store/objectives.h"
#include "worker/config/parse.h"

namespace precon::orch {

using nlohmann::json;

namespace {
json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json parse_or_string(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_discarded() ? json(text) : j;
}
// The trial's parallel layout from its resolved config; null when the config does not parse.
json layout_json(const std::string& config_toml) {
  try {
    const toml::table doc = worker::parse_toml_text(config_toml, "trial config");
    const int64_t tensor = doc["parallel"]["tensor"].value_or<int64_t>(1), data = doc["parallel"]["data"].value_or<int64_t>(1),
                  pipeline = doc["parallel"]["pipeline"].value_or<int64_t>(1);
    return {{"tensor", tensor},
            {"data", data},
            {"pipeline", pipeline},
            {"virtual_stages", doc["parallel"]["virtual_stages"].value_or<int64_t>(1)},
            {"expert", doc["parallel"]["expert"].value_or<int64_t>(1)},
            {"ranks", tensor * data * pipeline},
            {"backend", doc["parallel"]["backend"].value_or<std::string>("auto")}};
  } catch (const std::exception&) {
    return nullptr;
  }
}
}  // namespace

std::string path_from_run_root(const std::string& path) {
  const std::filesystem::path p(path);
  std::filesystem::path from_trial;
  bool found = false;
  for (const std::filesystem::path& part : p) {
    const std::string name = part.string();
    const bool trial_dir = name.size() > 6 && name.starts_with("trial-") &&
                           name.find_first_not_of("0123456789", 6) == std::string::npos;
    if (trial_dir) {
      from_trial.clear();
      found = true;
    }
    if (found) from_trial /= part;
  }
  return found ? from_trial.string() : p.filename().string();
}

void remote_view(json& view) {
  if (view.is_array()) {
    for (json& item : view) remote_view(item);
    return;
  }
  if (!view.is_object()) return;
  for (auto& [key, value] : view.items()) {
    if (value.is_string() && (key == "run_dir" || key == "path")) {
      value = path_from_run_root(value.get<std::string>());
    } else if (value.is_string() && (key == "run_root" || key == "recipe_path")) {
      value = std::filesystem::path(value.get<std::string>()).filename().string();
    } else if (key == "recipe" || key == "config") {
      value = nullptr;
    } else if (value.is_structured()) {
      remote_view(value);
    }
  }
}

std::map<TrialState, int64_t> count_states(const std::vector<TrialRow>& trials) {
  std::map<TrialState, int64_t> counts;
  for (const TrialRow& t : trials) ++counts[t.state];
  return counts;
}

std::map<std::string, int64_t> state_counts(const std::map<TrialState, int64_t>& by_state) {
  std::map<std::string, int64_t> counts;
  for (TrialState s : {TrialState::pending, TrialState::running, TrialState::completed, TrialState::failed,
                       TrialState::cancelled, TrialState::pruned})
    counts[trial_state_name(s)] = 0;
  for (const auto& [s, n] : by_state) counts[trial_state_name(s)] += n;
  return counts;
}

std::map<std::string, int64_t> state_counts(const std::vector<TrialRow>& trials) {
  return state_counts(count_states(trials));
}

json experiment_json(const ExperimentRow& e, const std::vector<TrialRow>& trials, bool with_recipe) {
  return experiment_json(e, count_states(trials), with_recipe);
}

namespace {

// The objective, and with several ({"metrics": [...], "modes": [...]}) each of them; the first is
// metric/mode.
json objective_view(const ExperimentRow& e) {
  json j = {{"metric", e.objective_metric}, {"mode", e.objective_mode}};
  const std::vector<StoredObjective> objectives = experiment_objectives(e);
  if (objectives.size() > 1) {
    j["metrics"] = json::array();
    j["modes"] = json::array();
    for (const StoredObjective& o : objectives) {
      j["metrics"].push_back(o.metric);
      j["modes"].push_back(o.mode);
    }
  }
  return j;
}

}  // namespace

json experiment_json(const ExperimentRow& e, const std::map<TrialState, int64_t>& counts, bool with_recipe) {
  int64_t total = 0;
  for (const auto& [s, n] : counts) total += n;
  json j = {{"id", e.id},
            {"name", e.name},
            {"description", e.description},
            {"state", experiment_state_name(e.state)},
            {"objective", objective_view(e)},
            {"max_concurrent", e.max_concurrent},
            {"max_attempts", e.max_attempts},
            {"early_stop", parse_or_string(e.early_stop_json)},
            {"run_root", e.run_root},
            {"recipe_path", e.recipe_path},
            {"created_at", e.created_at},
            {"ended_at", e.ended_at > 0 ? json(e.ended_at) : json(nullptr)},
            {"trials", total},
            {"trial_states", state_counts(counts)}};
  if (with_recipe) {
    j["recipe"] = e.recipe_text;
    j["overrides"] = parse_or_string(e.overrides_json);
  }
  return j;
}

json trial_json(const TrialRow& t, bool with_config) {
  json j = {{"id", t.id},
            {"experiment_id", t.experiment_id},
            {"index", t.index},
            {"params", parse_or_string(t.params_json)},
            {"state", trial_state_name(t.state)},
            {"reason", t.reason},
            {"run_dir", t.run_dir},
            {"attempts", t.attempts},
            {"last_step", t.last_step},
            {"created_at", t.created_at},
            {"started_at", t.started_at > 0 ? json(t.started_at) : json(nullptr)},
            {"ended_at", t.ended_at > 0 ? json(t.ended_at) : json(nullptr)}};
  if (with_config) {
    j["config"] = t.config_toml;
    j["layout"] = layout_json(t.config_toml);
  }
  return j;
}

json attempt_json(const AttemptRow& a) {
  return {{"id", a.id},
          {"number", a.number},
          {"executor", a.executor},
          {"external_id", a.external_id},
          {"nodes", a.nodes},
          {"state", attempt_state_name(a.state)},
          {"exit_code", a.exit_code >= 0 ? json(a.exit_code) : json(nullptr)},
          {"detail", a.detail},
          {"started_at", a.started_at},
          {"ended_at", a.ended_at > 0 ? json(a.ended_at) : json(nullptr)}};
}

json checkpoint_json(const CheckpointRow& c) {
  return {{"id", c.id},
          {"step", c.step},
          {"path", c.path},
          {"objective", number_or_null(c.objective)},
          {"created_at", c.created_at},
          {"deleted_at", c.deleted_at > 0 ? json(c.deleted_at) : json(nullptr)}};
}

json event_json(const EventRow& e) {
  return {{"id", e.id},
          {"time", e.time},
          {"experiment_id", e.experiment_id},
          {"trial_id", e.trial_id > 0 ? json(e.trial_id) : json(nullptr)},
          {"kind", e.kind},
          {"message", e.message},
          {"data", parse_or_string(e.data_json)}};
}

json metric_points_json(const std::vector<MetricPoint>& points) {
  json steps = json::array(), values = json::array(), times = json::array();
  for (const MetricPoint& p : points) {
    steps.push_back(p.step);
    values.push_back(number_or_null(p.value));
    times.push_back(p.time);
  }
  return {{"steps", steps}, {"values", values}, {"times", times}};
}

std::string tail_file(const std::string& path, size_t lines) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a link is not followed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return "";
    if (errno == ELOOP) throw LogFileError(path + " is a symbolic link, not a log file");
    throw LogFileError("cannot open " + path + ": " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw LogFileError("cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw LogFileError(path + " is not a regular file, not a log");
  const off_t size = st.st_size;
  const off_t start = size > static_cast<off_t>(kLogTailBytes) ? size - static_cast<off_t>(kLogTailBytes) : 0;
  std::string tail(static_cast<size_t>(size - start), '\0');
  size_t got = 0;
  while (got < tail.size()) {
    const ssize_t n = ::pread(fd, tail.data() + got, tail.size() - got, start + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw LogFileError("cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;  // the file shrank meanwhile
    got += static_cast<size_t>(n);
  }
  tail.resize(got);
  size_t pos = tail.size();
  size_t count = 0;
  if (!tail.empty() && tail.back() == '\n') --pos;
  while (pos > 0) {
    if (tail[pos - 1] == '\n' && ++count == lines) break;
    --pos;
  }
  // The window cut a line: it starts at the window's first complete line.
  if (pos == 0 && start > 0) {
    const size_t nl = tail.find('\n');
    pos = nl == std::string::npos || nl + 1 >= tail.size() ? tail.size() : nl + 1;
  }
  return tail.substr(pos);
}

}  // namespace precon::orch
