// JSON views of stored rows: the one representation the HTTP API returns and `precon ... --json`
// prints, so scripts see the same thing either way.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/store/store.h"

namespace precon::orch {

nlohmann::json experiment_json(const ExperimentRow& e, const std::vector<TrialRow>& trials, bool with_recipe = false);
// The same from per-state counts (Store::trial_state_counts(id)), without reading the trials.
nlohmann::json experiment_json(const ExperimentRow& e, const std::map<TrialState, int64_t>& counts,
                               bool with_recipe = false);
nlohmann::json trial_json(const TrialRow& t, bool with_config = false);
nlohmann::json attempt_json(const AttemptRow& a);
nlohmann::json checkpoint_json(const CheckpointRow& c);
nlohmann::json event_json(const EventRow& e);
nlohmann::json metric_points_json(const std::vector<MetricPoint>& points);

// What a reader on another machine without a token sees of a view (the API's, above): run
// directories and checkpoint paths relative to the run root ("trial-12/step_00000100"), the run
// root and the recipe's file by their last name only, no recipe or trial config text. Walks
// objects and arrays, pages of rows included.
void remote_view(nlohmann::json& view);
// A path from its trial's run directory on ("trial-<id>/..."), or its last name when it has none.
std::string path_from_run_root(const std::string& path);

// Trials per state, e.g. {"pending": 2, "running": 1, ...}.
std::map<std::string, int64_t> state_counts(const std::vector<TrialRow>& trials);
std::map<std::string, int64_t> state_counts(const std::map<TrialState, int64_t>& counts);
std::map<TrialState, int64_t> count_states(const std::vector<TrialRow>& trials);

// A log that cannot be read as one: not a regular file (a FIFO, a device, a directory), a symbolic
// link, or unreadable. The message names the path and what it is.
class LogFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The most a log's tail is read from: one window of this many bytes at the file's end.
constexpr size_t kLogTailBytes = 8u << 20;

// The last `lines` lines of a text file ("" when missing), taken from its last kLogTailBytes only:
// one read of a bounded window whatever the file's size (a longer tail starts at the window's first
// complete line). Opened without blocking and without following a link; anything but a regular
// file throws LogFileError.
std::string tail_file(const std::string& path, size_t lines);

}  // namespace precon::orch
