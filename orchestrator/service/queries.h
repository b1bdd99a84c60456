// Read-side queries shared by the HTTP handlers and the CLI (which may read the database
// directly): the same answers either way.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "orchestrator/service/best.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

// Experiment by id ("12") or by name (the newest with that name); throws std::out_of_range.
ExperimentRow find_experiment(const Store& store, const std::string& id_or_name);

// `precon best`: rankings at equal steps and equal wall-clock, and the Pareto front.
BestReport best_report(const Store& store, const ExperimentRow& experiment);

// An experiment's best, kept for as long as nothing it read changed: `precon best`'s report, the
// best objective point over all its trials (the dashboard's experiments list), a study's report
// (study/report.h: the fit's bootstrap takes up to a second) and the keys' importance
// (study/importance_report.h: a random forest). A write to the store other than
// metric points (trial states, attempts, events, experiments: store_written) ends every kept value,
// metric points stored for a trial (metrics_stored) end its experiment's. Requests for one
// experiment's report (or study) while it is computed wait for that one computation. At most kKept
// reports and kKept studies are kept, the least recently asked for dropped first; an objective
// point is kept for every experiment asked for (it is one point).
// Thread-safety: every member from any thread.
class BestCache {
 public:
  static constexpr size_t kKept = 2;

  void store_written(const char* op);  // the store's write observer
  void metrics_stored(int64_t experiment_id);
  std::shared_ptr<const BestReport> report(const Store& store, const ExperimentRow& experiment);
  size_t computed() const { return computed_.load(); }  // reports computed so far (tests)
  // study::study_report of the experiment; its std::invalid_argument (not a study) passes through
  // and nothing is kept.
  std::shared_ptr<const nlohmann::json> study(const Store& store, const ExperimentRow& experiment);
  size_t studies_computed() const { return studies_computed_.load(); }  // study reports computed so far (tests)
  // study::importance_report of the experiment as JSON with "ok": true, or, when there is nothing
  // to rank yet (study::ImportanceError), "ok": false and the "reason".
  std::shared_ptr<const nlohmann::json> importance(const Store& store, const ExperimentRow& experiment);
  // Store::best_metric of the experiment's objective (metric and mode): one query of the store,
  // none again while the experiment's data stays as it was.
  std::optional<TrialMetricPoint> objective_best(const Store& store, const ExperimentRow& experiment);

 private:
  template <class T>
  struct Kept {
    uint64_t global = 0, local = 0;  // the versions it was computed at
    uint64_t used = 0;               // when it was last asked for (clock_)
    std::shared_ptr<const T> value;
  };
  // The kept values of one kind, and one computation per experiment at once.
  template <class T>
  struct Shelf {
    std::map<int64_t, Kept<T>> kept;
    std::map<int64_t, std::shared_ptr<std::mutex>> computing;
  };
  struct KeptPoint {
    uint64_t global = 0, local = 0;  // the versions it was computed at
    std::optional<TrialMetricPoint> best;
  };
  // The shelf's value for the experiment, computed by compute() unless the kept one is current.
  template <class T, class Compute>
  std::shared_ptr<const T> kept(Shelf<T>& shelf, int64_t experiment_id, Compute compute);

  std::atomic<uint64_t> global_{1};
  std::atomic<size_t> computed_{0};
  std::atomic<size_t> studies_computed_{0};
  std::mutex mu_;  // guards what follows
  std::map<int64_t, uint64_t> local_;  // experiment -> version of its metric points
  Shelf<BestReport> reports_;
  Shelf<nlohmann::json> studies_;
  Shelf<nlohmann::json> importances_;
  std::map<int64_t, KeptPoint> objective_bests_;
  uint64_t clock_ = 0;
};

// A page of a report: every ranking's entries and the Pareto list cut to [offset, offset + limit).
struct BestPage {
  BestReport report;
  int64_t next_cursor = 0;  // offset + limit when a list goes on; 0 when none does
};
BestPage best_page(const BestReport& full, size_t offset, size_t limit);

// Whether the trial has stored any metric (one index probe).
bool has_metrics(const Store& store, int64_t trial_id);

// A trial's summary row: state, params, last objective value, steps, seconds per step.
// has_metrics false: the trial is known to have none (Store::trials_with_metrics), nothing is read.
nlohmann::json trial_summary_json(const Store& store, const TrialRow& trial, const ExperimentRow& experiment,
                                  bool has_metrics = true);

// Every metric of a trial (or one), each downsampled to max_points.
nlohmann::json trial_metrics_json(const Store& store, int64_t trial_id, const std::string& name, size_t max_points);

}  // namespace precon::orch
