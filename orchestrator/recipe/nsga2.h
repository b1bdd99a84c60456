// sweep.method = "nsga2": the genetic algorithm NSGA-II, as Optuna 3.1's NSGAIISampler with its
// defaults (uniform crossover). Trial i belongs to generation i / population_size. Generation 0 is
// drawn at random; a trial of generation g > 0 is bred from the parent population of g: the elite
// (nsga2_elite) of generation g-1's complete trials together with g-1's own parents, built up from
// generation 0 the way Optuna does. A child takes two parents, each the winner of a binary
// tournament (the first of two random picks if it dominates the second, else the second); with
// probability crossover_prob each key comes from either parent (the second when a draw is >=
// swapping_prob), else the child copies one random parent; then each key is drawn anew with
// probability mutation_prob (0: 1/number of keys). Unlike Optuna, a child equal to a trial already
// made is bred again (up to 100 times, then drawn at random), so parallel slots never run the same
// values twice. Pure functions of the space, the trials and the stream; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "orchestrator/recipe/pareto.h"
#include "orchestrator/recipe/rng.h"
#include "orchestrator/recipe/tpe.h"
#include "worker/config/config.h"

namespace precon::orch {

// Optuna's _select_elite_population of `population` (positions into `losses`, in the order given):
// whole fronts while they fit in `size`, then the next front's largest crowding distances
// (crowding_sort on `values`, the objectives as reported).
std::vector<size_t> nsga2_elite(const std::vector<Loss>& losses, const std::vector<Loss>& values,
                                const std::vector<size_t>& population, size_t size);

// The point proposed for trial `index` (internal form, as tpe_propose's) from `trials` in index
// order: complete ones with `losses` (and `values`, the same objectives as reported) breed;
// every one's x counts as taken. `values` may be empty: the losses are used.
struct NsgaTrial {
  std::vector<double> x;
  bool complete = false;
  Loss losses;
  Loss values;
};
std::vector<double> nsga2_propose(const std::vector<TpeParam>& space, const std::vector<NsgaTrial>& trials, int64_t index,
                                  const worker::NsgaSettings& settings, Rng& rng);

}  // namespace precon::orch
