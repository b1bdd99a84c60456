// `precon best EXP`: with several objectives (objective.metrics), first the Pareto front of the
// trials' final values of them all (objective_front; rank 1 = on the front). Then it ranks an experiment's trials by the objective ([objective] metric and mode)
// at equal steps, at equal wall-clock seconds and at equal model FLOPs, and finds the Pareto front of (final objective,
// seconds per step). Pure logic over series the caller loaded; no I/O. Thread-safety: free
// functions over values; safe from any thread.
//
// The reference set is the completed trials that reported the objective (every trial with
// objective points while none has completed yet):
//  - at equal steps: S = the largest step every reference trial reached (the smallest of their
//    last objective steps). A trial that reached S is ranked by its last value at or before S.
//    A trial that stopped short of S (pruned, failed, cancelled, still running) is ranked below
//    all of those, by its last value, with a note saying where it ended.
//  - at equal wall-clock: the same with seconds. A point's time is its step's elapsed seconds,
//    linearly interpolated between the elapsed points around it (step 0 is at 0 s); a point
//    after the last elapsed point has no time. E = the smallest time of the reference trials'
//    last timed points; ranked by the last value at or before E.
//  - at equal compute: the same with the FLOPs spent up to each step (the trainer's
//    `compute_flops`, the model's and the optimizer's: Muon's Newton-Schulz, Shampoo's roots,
//    SOAP's rotations; its `flops`, the model's alone, from a trial without them; interpolated as
//    the seconds are), so trials of different shapes, families, batch sizes or optimizers compare
//    on what they cost; F = the smallest FLOPs of the reference trials' last points.
//  - Pareto front over the reference trials: final value (the last objective point) against
//    mean seconds per step (the mean of the step_seconds series, or else the slope of elapsed
//    over steps between its first and last points, or elapsed / step with one point). Trials
//    that no other trial beats on one axis while matching it on the other are on the front;
//    equal points are both on it; a trial off the front names the trials of the front that beat
//    it (the 16 fastest). Trials outside the reference set, with a non-finite final value or
//    without timing are listed with a note and not compared.
// Equal values share a rank ("1, 2, 2, 4"); listed by trial id within a tie. A NaN value gets no
// rank (rank 0) and is listed after the ranked trials of its group.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/store/store.h"

namespace precon::orch {

class BestError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct BestTrial {
  int64_t id = 0;
  std::string label;                       // the swept params, e.g. "optimizer.name=muon"
  TrialState state = TrialState::completed;
  std::string reason;                      // why a failed trial ended (the trainer's error), for its note
  std::map<int64_t, double> objective;     // step -> objective value
  std::map<int64_t, double> elapsed;       // step -> wall-clock seconds since the trial started
  std::map<int64_t, double> step_seconds;  // step -> seconds per step as measured; may be empty
  std::map<int64_t, double> flops;         // step -> FLOPs spent up to it (compute_flops, else flops); may be empty
  std::vector<double> finals;              // several objectives: each one's last value (NaN: none), in order
};

struct BestSettings {
  std::string metric = "val_loss";  // the objective's metric name
  std::string mode = "min";         // "min" | "max"
  // Several objectives (objective.metrics): their names and modes, the first also above; empty: one.
  std::vector<std::string> metrics;
  std::vector<std::string> modes;
};

struct RankEntry {
  int64_t trial = 0;
  std::string label;
  TrialState state = TrialState::completed;
  int64_t rank = 0;      // 1-based, shared by ties; 0 = not ranked (NaN or no value)
  double value = std::numeric_limits<double>::quiet_NaN();  // the objective used (NaN: none)
  int64_t step = -1;     // the step of that value (-1 when none)
  double seconds = -1;   // its wall-clock seconds (-1 when unknown)
  double flops = -1;     // the FLOPs spent up to it, the optimizer's included (-1 when unknown)
  bool reached = false;  // reached the common step (or time)
  std::string note;      // why it is ranked as it is, "" for a completed trial that reached it
};

struct Ranking {
  bool defined = false;  // false when no trial has the data this ranking needs
  double at = 0;         // S (a step), E (seconds) or F (FLOPs)
  std::vector<RankEntry> entries;  // best first
};

constexpr size_t kMaxDominatedBy = 16;

struct ParetoEntry {
  int64_t trial = 0;
  std::string label;
  TrialState state = TrialState::completed;
  double final_value = std::numeric_limits<double>::quiet_NaN();  // NaN when none
  int64_t final_step = -1;
  double seconds_per_step = -1;     // -1 when unknown
  bool compared = false;            // part of the front computation
  bool on_front = false;
  // Trials of the front that beat it (only when compared): the kMaxDominatedBy fastest, by id.
  std::vector<int64_t> dominated_by;
  std::string note;
};

// Several objectives: a trial on the Pareto front of their final values. Compared: the reference
// trials (as above) with a finite final value of every objective; rank 1 is the front (no compared
// trial is as good on every objective and better on one), rank 2 the front once rank 1 is set
// aside, and so on (non-dominated sorting).
struct FrontEntry {
  int64_t trial = 0;
  std::string label;
  TrialState state = TrialState::completed;
  std::vector<double> values;  // each objective's final value (NaN: none)
  int64_t rank = 0;            // 1 = on the front; 0 = not compared
  bool on_front = false;
  std::string note;
};

struct BestReport {
  BestSettings settings;
  Ranking at_step;
  Ranking at_time;
  Ranking at_flops;
  std::vector<ParetoEntry> pareto;  // front by seconds per step, then dominated, then the rest
  std::vector<FrontEntry> front;    // several objectives: by rank, then id; then those not compared
};

// The Pareto front of several objectives (settings.metrics/modes) over the trials' `finals`.
std::vector<FrontEntry> objective_front(const std::vector<BestTrial>& trials, const BestSettings& settings);

// True for objective.mode "max", false for "min"; BestError for any other mode. The one place the
// service reads an objective's direction (here, the dashboard's best points and BestCache).
bool maximizes(const std::string& mode);

// Throws BestError for a mode other than "min" or "max".
BestReport rank_trials(const std::vector<BestTrial>& trials, const BestSettings& settings);

// Aligned plain-text tables, one section per view.
std::string format_best_table(const BestReport& report);

// The same as JSON; non-finite numbers become null.
nlohmann::json best_to_json(const BestReport& report);

}  // namespace precon::orch
