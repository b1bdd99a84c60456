// Bounds on what a worker's reports may make of its trial's record: steps no further than the
// trial's train.steps (the trainer reports train and validation metrics at training steps
// 1..train.steps only; a recipe's own program, which counts its steps itself, has no such bound),
// and at most kMaxMetricNames distinct metric names per trial, where the
// per-layer names of one family (`moe_load_max.layer0`, `moe_load_max.layer1`, ... with the
// index below the trial's model.n_layer) count as one name. A report past either bound is
// refused whole (HttpError 400 bad_report), so nothing already recorded changes.
// Thread-safety: every member may be called from any thread; check_and_reserve and forget
// serialise on one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "orchestrator/store/store.h"

namespace precon::orch {

class ReportLimits {
 public:
  static constexpr size_t kMaxMetricNames = 256;  // distinct names (per-layer families as one) per trial
  static constexpr size_t kMaxTrialsKept = 4096;  // trials whose names are kept; more: reloaded from the store

  explicit ReportLimits(const Store& store) : store_(store) {}

  // Throws HttpError 400 bad_report when the points go past the trial's bounds; otherwise counts
  // their names as the trial's (forget() undoes that when the report is not stored after all).
  // Call it only for an authenticated report: it reads the trial's config. Returns the trial's
  // experiment id.
  int64_t check_and_reserve(int64_t trial_id, const std::vector<MetricPoint>& points);
  // Drops what is known of the trial; the next report reloads it from the store.
  void forget(int64_t trial_id);

  // The name a metric counts as: "<base>.layer*" for "<base>.layer<N>" with N < layers, else itself.
  static std::string counted_name(const std::string& name, int64_t layers);

 private:
  struct Trial {
    int64_t experiment = 0;        // the experiment's id
    int64_t max_step = 0;          // train.steps; INT64_MAX for a recipe's own program
    int64_t layers = 0;            // model.n_layer + model.mtp_layers
    std::set<std::string> names;   // counted names stored (or being stored)
  };
  Trial& load(int64_t trial_id);

  const Store& store_;
  std::mutex mu_;
  std::map<int64_t, Trial> trials_;
};

}  // namespace precon::orch
