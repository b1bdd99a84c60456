// The tree-structured Parzen estimator (sweep.method = "tpe"), as Optuna's TPESampler: after
// n_startup_trials random draws, the trials so far are split into the gamma(n) = min(ceil(0.1 n), 25)
// best ("below") and the rest ("above"); a Parzen estimator of each (a kernel per trial plus a
// prior kernel over the whole range), l(x) and g(x); n_ei_candidates points drawn from l, and the
// one with the largest log l − log g is proposed. Pure functions of the space, the trials and a
// seed; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchestrator/recipe/rng.h"
#include "worker/config/config.h"

namespace precon::orch {

// One dimension of the search space. Values are in "internal" form: the number itself for real
// and integer keys, the index of the choice for categorical ones.
struct TpeParam {
  enum Kind { real, integer, categorical };
  Kind kind = real;
  bool log = false;        // real only: the estimator works on ln x
  double lo = 0, hi = 1;   // real, integer: the range, both inclusive
  double step = 0;         // real: 0 = continuous, else lo + k·step; integer: the step (>= 1)
  int64_t choices = 0;     // categorical: the number of choices
};

// A trial the estimator learns from.
struct TpeObservation {
  enum State { complete, pruned, running };
  State state = complete;
  std::vector<double> x;   // one value per dimension of the space; NaN: the trial has no such key
  double value = 0;        // complete: the objective; pruned: the last intermediate value (NaN: none)
  int64_t step = -1;       // pruned: the step of that value (-1: it reported none)
  // Several objectives (complete trials): each as a loss, smaller better (a "max" one negated).
  // Non-empty in every trial of a multi-objective study (then `value` is unused).
  std::vector<double> losses{};
};

// A Parzen estimator over some dimensions (Optuna's _ParzenEstimator with the prior, the magic
// clip and default weights): a mixture of one kernel per observation and the prior kernel.
class ParzenEstimator {
 public:
  // `weights`: each observation's weight before the prior's is added (MOTPE's); null: tpe_default_weights.
  ParzenEstimator(const std::vector<TpeParam>& space, const std::vector<std::vector<double>>& observations,
                  const worker::TpeSettings& settings, const std::vector<double>* weights = nullptr);
  // log density of a point (internal form; integers and steps: the mass of its cell).
  double log_pdf(const std::vector<double>& x) const;
  // Points drawn from the mixture, in internal form (rounded to the step, clipped to the range).
  std::vector<std::vector<double>> sample(Rng& rng, size_t n) const;
  const std::vector<double>& weights() const { return weights_; }

 private:
  std::vector<TpeParam> space_;
  std::vector<double> weights_;                   // per kernel, summing to 1; the prior last
  std::vector<double> low_, high_, q_;            // per dimension, on the scaled axis (ln for log)
  std::vector<std::vector<double>> mus_, sigmas_; // numeric dimensions: per kernel
  std::vector<std::vector<std::vector<double>>> categorical_;  // categorical: per kernel, per choice
};

// Optuna's default_weights: 1 for each of up to 25 observations; beyond, the oldest ramp from
// 1/n up to 1 and the 25 newest keep 1.
std::vector<double> tpe_default_weights(size_t n);
// gamma(n) = min(ceil(0.1 n), 25): how many of n finished trials are "below".
int64_t tpe_gamma(int64_t n);

// The indices of the trials ranked best first, as Optuna ranks them: complete trials by value,
// then pruned ones by their last step (later first) and value, then running ones (the constant
// liar: the worst). `maximize` ranks larger values first. Stable: ties keep trial order.
std::vector<size_t> tpe_rank(const std::vector<TpeObservation>& trials, bool maximize);

// A proposal and what it was chosen by.
struct TpeProposal {
  std::vector<double> x;        // internal form, one per dimension
  bool random = false;          // drawn at random (fewer than n_startup_trials finished trials)
  double log_l = 0, log_g = 0;  // of the proposal (0 when random)
};

// MOTPE (several objectives: the trials carry `losses`), as Optuna 3.1's TPESampler with several
// objectives: only complete trials are observed (pruned and running ones are not, constant liar or
// not); the below trials are motpe_below's (pareto.h), in its order, each weighted in l(x) by its
// hypervolume contribution (motpe_below_weights); the above ones keep trial order and default weights.
//
// Proposes the next point over `space` from `trials` (failed trials left out by the caller;
// running ones used only with constant_liar). With multivariate, one joint estimator over the
// dimensions; without, each dimension on its own (Optuna's independent sampling). Dimensions a
// trial lacks (NaN) leave it out of those dimensions' estimators but not out of the ranking, as
// Optuna's grouped search spaces do.
TpeProposal tpe_propose(const std::vector<TpeParam>& space, const std::vector<TpeObservation>& trials,
                        const worker::TpeSettings& settings, bool maximize, Rng& rng);

// A point drawn uniformly (Optuna's RandomSampler): the startup trials.
std::vector<double> tpe_random_point(const std::vector<TpeParam>& space, Rng& rng);

}  // namespace precon::orch
