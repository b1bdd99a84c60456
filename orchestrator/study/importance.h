// Which swept keys mattered: fANOVA (Hutter, Hoos and Leyton-Brown, 2014) as Optuna's
// FanovaImportanceEvaluator computes it.
//
// A random forest regresses the objective on the parameters: `trees` CART trees, each grown on a
// bootstrap sample of the trials (drawn with replacement), squared error, every column considered
// at every split (the best cut between two neighbouring distinct values, at their midpoint), a
// node split while it has 2 or more samples that differ, 1 sample a leaf at the least, depth at
// most `max_depth`. Then, per tree, the prediction marginalised to one parameter (averaged over
// every other one across the search space, weighted by volume) has a variance; its share of the
// tree's total variance, averaged over the trees whose variance is not 0, is the parameter's
// importance, and the importances are normalised to sum to 1.
//
// Numeric parameters are one column on their range, untransformed (a log-uniform key's raw
// values, as Optuna's evaluator with transform_log = False); categorical ones (lists, choices)
// one 0/1 column per choice on [0, 1], and their importance is those columns' joint marginal.
// A parameter with one value (or an empty range) gets 0. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace precon::study {

class ImportanceError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ImportanceParam {
  std::string name;
  bool categorical = false;
  double lo = 0.0, hi = 0.0;  // numeric: the range searched
  int64_t choices = 0;        // categorical: how many values
};

// One finished trial: a value per parameter (numeric: the value; categorical: the choice's index
// from 0) and its objective.
struct ImportanceTrial {
  std::vector<double> values;
  double objective = 0.0;
};

struct ImportanceSettings {
  int64_t trees = 64;
  int64_t max_depth = 64;
  uint64_t seed = 0;
};

struct ParamImportance {
  std::string name;
  double importance = 0.0;  // share, the parameters' sum 1
  double spread = 0.0;      // standard deviation of the per-tree shares (before normalising)
};

// The parameters by importance, largest first (ties in the given order). Throws ImportanceError
// with fewer than 2 trials, values outside the parameters, or an objective that does not vary.
std::vector<ParamImportance> fanova_importance(const std::vector<ImportanceParam>& params,
                                               const std::vector<ImportanceTrial>& trials,
                                               const ImportanceSettings& settings = {});

}  // namespace precon::study
