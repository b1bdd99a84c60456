#include "orchestrator/service/report_limits.h"

#include <algorithm>
#include <limits>

#include "orchestrator/http/errors.h"
#include "orchestrator/recipe/recipe.h"

namespace precon::orch {

std::string ReportLimits::counted_name(const std::string& name, int64_t layers) {
  static const std::string kLayer = ".layer";
  const size_t at = name.rfind(kLayer);
  if (at == std::string::npos || at == 0) return name;
  const std::string digits = name.substr(at + kLayer.size());
  // A plain decimal index (no sign, no leading zero but "0" itself), small enough to compare.
  if (digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return name;
  if (std::stoll(digits) >= layers) return name;
  return name.substr(0, at) + ".layer*";
}

ReportLimits::Trial& ReportLimits::load(int64_t trial_id) {
  auto it = trials_.find(trial_id);
  if (it != trials_.end()) return it->second;
  const std::optional<TrialRow> row = store_.trial(trial_id);
  if (!row) throw HttpError(404, "not_found", "no trial " + std::to_string(trial_id));
  const StoredTrial stored = parse_stored_trial(row->config_toml, "trial " + std::to_string(trial_id));
  const worker::TrialConfig& config = stored.config;
  if (trials_.size() >= kMaxTrialsKept) trials_.clear();
  Trial t;
  t.experiment = row->experiment_id;
  // A recipe's own program counts its steps itself.
  t.max_step = stored.command.empty() ? config.train.steps : std::numeric_limits<int64_t>::max();
  t.layers = config.model.blocks();  // with the MTP modules' blocks (model.layers.{n_layer + k − 1})
  for (const std::string& name : store_.metric_names(trial_id)) t.names.insert(counted_name(name, t.layers));
  return trials_.emplace(trial_id, std::move(t)).first->second;
}

int64_t ReportLimits::check_and_reserve(int64_t trial_id, const std::vector<MetricPoint>& points) {
  std::lock_guard lock(mu_);
  Trial& t = load(trial_id);
  std::set<std::string> fresh;
  for (const MetricPoint& p : points) {
    if (p.step > t.max_step)
      throw HttpError(400, "bad_report",
                      "step " + std::to_string(p.step) + " is past trial " + std::to_string(trial_id) +
                          "'s train.steps (" + std::to_string(t.max_step) + "); nothing of this report was stored");
    const std::string counted = counted_name(p.name, t.layers);
    if (!t.names.count(counted)) fresh.insert(counted);
  }
  if (t.names.size() + fresh.size() > kMaxMetricNames)
    throw HttpError(400, "bad_report",
                    "trial " + std::to_string(trial_id) + " would have " + std::to_string(t.names.size() + fresh.size()) +
                        " distinct metric names, more than " + std::to_string(kMaxMetricNames) +
                        " (per-layer names <name>.layerN count once); nothing of this report was stored");
  t.names.insert(fresh.begin(), fresh.end());
  return t.experiment;
}

void ReportLimits::forget(int64_t trial_id) {
  std::lock_guard lock(mu_);
  trials_.erase(trial_id);
}

}  // namespace precon::orch
