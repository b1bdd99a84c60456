// Early stopping of sweep trials ([sweep.early_stop]): ASHA, Hyperband and the median rule; with
// several objectives the Pareto rule (pareto_stop, below).
//
// Pure logic, no I/O, no state: every decision is a function of the experiment's reported
// objective points so far, so a restarted controller rebuilds exactly what it had. Thread-safety:
// an EarlyStopper is immutable after construction; report() may be called from any thread.
//
// Both rules reproduce Optuna's pruners decision for decision (checked against Debian's
// python3-optuna by tests/orchestrator/sched/test_early_stop.cpp):
//
// asha   = SuccessiveHalvingPruner(min_resource = min_step, reduction_factor,
//          min_early_stopping_rate, bootstrap_count = 0). Rung k sits at step
//          min_step * reduction_factor^(min_early_stopping_rate + k). The first report of a trial
//          at a step >= the rung's step "records" that report's value at the rung (one report can
//          pass several rungs; it records the same value at each in turn). The value competes with
//          the values every other trial recorded at that rung before, whatever that trial's state
//          now (running, completed, stopped). With n competitors (this one included) the trial
//          goes on iff its value is at least as good as the (max(n / reduction_factor, 1))-th best:
//          ties promote. A NaN value at a rung stops the trial and records nothing; a NaN between
//          rungs is ignored.
// hyperband = HyperbandPruner(min_resource = min_step, max_resource = max_step (train.steps),
//          reduction_factor, bootstrap_count = 0): floor(log(max_step / min_step) / log(rf)) + 1
//          brackets, bracket b an asha with min_early_stopping_rate = b over the trials of its
//          bracket only. A trial's bracket is Optuna's: crc32("<study_name>_<number>") modulo the
//          sum of the brackets' budgets ceil(n_brackets * rf^s / (s + 1)), s = n_brackets - 1 - b,
//          walked in bracket order; `number` is the trial's 0-based place in the experiment.
// median = MedianPruner(n_startup_trials, n_warmup_steps, interval_steps = interval). Only once at
//          least max(n_startup_trials, 1) trials have completed, at steps >= n_warmup_steps, and
//          only on the first report at or after each warmup + k * interval boundary: the trial
//          stops if the best value it has reported so far (NaNs skipped) is worse than the median
//          of the completed trials' values at exactly this step (numpy's nanpercentile(50),
//          inf/NaN quirks included). A trial whose values are all NaN stops. No completed value
//          at this step: no decision.
//
// Order. Decisions depend on what was reported before: the rung values recorded so far (asha)
// and which trials had completed (median). The scheduler calls report() once per new objective
// point, in the order it handles them on its strand, with `history` holding every point handled
// before plus this one and `completed` the trials it has marked completed. That sequence is the
// same as an Optuna study driven by ask()/tell() in which each trial reports and calls
// should_prune() in that order and is told COMPLETE when the scheduler marks it completed;
// max_concurrent = 1 is Optuna's sequential study.optimize(). A trial that is stopped reports no
// further points (the scheduler drops any that were in flight); a repeated point (a resumed
// attempt re-reporting a step) is not passed to report() again.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace precon::orch {

class EarlyStopError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EarlyStopSettings {
  std::string method;                 // "asha" | "hyperband" | "median" | "none"
  std::string mode = "min";           // "min" | "max": which direction of the objective is better
  std::string metric = "val_loss";    // objective name, only used in the reasons' text
  int64_t min_step = 100;             // asha: first rung's resource in steps (Optuna's min_resource)
  int64_t reduction_factor = 3;       // asha: rung spacing and the 1/rf fraction promoted; >= 2
  int64_t min_early_stopping_rate = 0;  // asha: skips the first rungs; >= 0
  int64_t max_step = 0;               // hyperband: the longest run in steps (train.steps)
  std::string study_name;             // hyperband: hashed with each trial's number into its bracket
  int64_t n_startup_trials = 5;       // median: completed trials needed before any stop
  int64_t n_warmup_steps = 0;         // median: no stop below this step
  int64_t interval = 1;               // median: steps between checks; >= 1
  int64_t min_dominating = 1;         // pareto: completed trials that must dominate a trial to stop it
  bool promote = false;               // asha, hyperband: a stopped trial goes on once promotions() names it
};

// One decision. `data` describes what was compared; for asha: step, value, rung (the deciding
// rung), rung_step, cutoff, competitors and `rungs` (every rung this report passed, with
// promoted true/false); for median: step, best, median, completed (trials with a value at step).
// Empty when no rule applied at this report.
struct StopDecision {
  bool stop = false;
  std::string rule;    // "asha" | "median" ("" when no rule applied)
  std::string reason;  // human text, e.g. "ASHA rung 1 (step 300): val_loss 2.91 is not in the
                       // top 1/3 of 7 trials (cutoff 2.8)"
  nlohmann::json data;
};

// asha, hyperband: a trial stopped at a rung whose value there is now in the top 1/reduction_factor
// of that rung's values (the rule that stopped it, applied to the rung's values recorded since).
struct Promotion {
  int64_t trial = 0;
  int64_t rung = 0;    // the rung it was stopped at (its bracket's rung for hyperband)
  std::string reason;  // e.g. "promoted at ASHA rung 0 (step 100): val_loss 2.8 is now in the top 2 of 6
                       // trials (1/3, cutoff 2.8)"
  nlohmann::json data; // rung, rung_step, value, cutoff, competitors, keep (and bracket, brackets)
};

// trial -> (step -> objective value).
using ObjectiveHistory = std::map<int64_t, std::map<int64_t, double>>;
// trial -> its 0-based number in the experiment (hyperband's brackets); a trial not listed is its
// own number.
using TrialNumbers = std::map<int64_t, int64_t>;

// The settings an experiment stored ([sweep.early_stop] as the scheduler writes it; missing keys
// take their defaults; median's warm-up is min_step).
EarlyStopSettings early_stop_settings_from_json(const nlohmann::json& stored, const std::string& metric,
                                                const std::string& mode, const std::string& study_name);

class EarlyStopper {
 public:
  // Throws EarlyStopError naming the offending [sweep.early_stop] key.
  explicit EarlyStopper(EarlyStopSettings settings);

  // `trial` reported objective `value` at `step`. `history` maps every trial of the experiment
  // (this one included; the point is added if absent) to its points so far; `completed` lists
  // the trials that completed. `stopped_rung` maps trials this stopper already stopped to the
  // data["rung"] of that decision: it is only needed when one report can pass several rungs
  // (reports sparser than the rung spacing) to know how far a stopped trial got; without it such
  // a trial counts at every rung its last report passed.
  // As in Optuna, the decision is made for the trial's highest reported step: a report below a
  // step already decided gets no decision.
  // hyperband: `numbers` gives each trial's bracket (see above).
  StopDecision report(int64_t trial, int64_t step, double value, const ObjectiveHistory& history,
                      const std::set<int64_t>& completed,
                      const std::map<int64_t, int64_t>& stopped_rung = {},
                      const TrialNumbers& numbers = {}) const;

  // asha, hyperband: the trials of `stopped` (trial -> the data["rung"] of the decision that stopped
  // it) that the values recorded so far at their rung now promote, by trial. A trial goes on when its
  // value at the rung is at least as good as the max(n / reduction_factor, 1)-th best of the n values
  // recorded there (its own included; stopped trials count only up to their rung): the test that
  // stopped it, with the values that came since. Other methods: none.
  std::vector<Promotion> promotions(const ObjectiveHistory& history, const std::map<int64_t, int64_t>& stopped,
                                    const TrialNumbers& numbers = {}) const;

  // asha: the rung steps <= max_step in order; hyperband: those of its first bracket (every
  // bracket's rungs are a suffix of them); other methods: none.
  std::vector<int64_t> rungs(int64_t max_step) const;

  // hyperband: the number of brackets and the bracket of the trial with this number.
  int64_t brackets() const { return static_cast<int64_t>(brackets_.size()); }
  int64_t bracket_of(int64_t number) const;

  const EarlyStopSettings& settings() const { return s_; }

 private:
  int64_t rung_step(int64_t rung) const;
  std::vector<double> recorded_rungs(const std::map<int64_t, double>& points, int64_t below_step,
                                     int64_t cap) const;
  StopDecision asha(int64_t trial, const std::map<int64_t, double>& own,
                    const ObjectiveHistory& history,
                    const std::map<int64_t, int64_t>& stopped_rung) const;
  StopDecision median(int64_t trial, const std::map<int64_t, double>& own,
                      const ObjectiveHistory& history, const std::set<int64_t>& completed) const;

  StopDecision hyperband(int64_t trial, int64_t step, double value, const ObjectiveHistory& history,
                         const std::map<int64_t, int64_t>& stopped_rung, const TrialNumbers& numbers) const;

  enum class Method { asha, hyperband, median, pareto, none };

  EarlyStopSettings s_;
  Method method_ = Method::none;  // s_.method
  bool maximize_ = false;         // s_.mode = "max"
  std::vector<EarlyStopper> brackets_;   // hyperband: bracket b's asha (rate b)
  std::vector<int64_t> bracket_budgets_;  // hyperband: each bracket's share of the trials
  int64_t total_budget_ = 0;              // hyperband: their sum
};

// pareto (several objectives, objective.metrics; sweep.early_stop.method = "pareto"): a rule of
// precon's own, as Optuna's pruners rank by one objective. At a step >= min_step where the trial has
// a finite value of every objective (`own`, in the order of `metrics`), it stops when at least
// min_dominating of the completed trials' vectors at that same step (`completed_at_step`, trial ->
// values; those without every value there are left out) dominate it: no objective worse, one
// better (`maximize` per objective). The decision (stop or not) names the dominating trials; no
// decision below min_step or without every value. (EarlyStopper::report gives none for pareto: the
// scheduler calls this with the vectors it reads from the store.)
StopDecision pareto_stop(int64_t trial, int64_t step, const std::vector<double>& own,
                         const std::map<int64_t, std::vector<double>>& completed_at_step,
                         const std::vector<std::string>& metrics, const std::vector<bool>& maximize,
                         int64_t min_step, int64_t min_dominating);

// numpy.nanpercentile(values, 50) bit for bit: NaNs dropped, linear interpolation with numpy's
// two-sided lerp (so a median next to an infinity can be NaN). NaN when nothing is left.
double numpy_nanmedian(std::vector<double> values);

}  // namespace precon::orch
