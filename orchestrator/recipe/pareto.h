// Pareto fronts of several objectives (objective.metrics): domination, non-domination ranks,
// hypervolume and the orderings that MOTPE (tpe.h) and NSGA-II (nsga2.h) select trials by. Every
// vector is a loss: each objective signed so that smaller is better (a "max" objective negated).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <vector>

namespace precon::orch {

using Loss = std::vector<double>;

// a dominates b: no objective worse, one better.
bool pareto_dominates(const Loss& a, const Loss& b);

// Each point's non-domination rank: 0 for the front, 1 for the front once it is removed, ...
std::vector<int> nondomination_ranks(const std::vector<Loss>& points);

// The volume dominated by the points and bounded by `reference` (every point at or below it), by
// the WFG algorithm (exact, any number of objectives; two by a sweep).
double hypervolume(const std::vector<Loss>& points, const Loss& reference);

// The reference point MOTPE measures a set against: max(1.1 w, 0.9 w) of its worst w per objective,
// a 0 made 1e-12.
Loss hypervolume_reference(const std::vector<Loss>& points);

// Greedy hypervolume subset selection: `k` of the points (their positions), each the one adding
// the most hypervolume to those chosen before it, in the order chosen.
std::vector<size_t> hypervolume_subset(const std::vector<Loss>& points, size_t k, const Loss& reference);

// MOTPE's split of the ranked trials: the `n_below` best by non-domination rank, the rank that
// does not fit whole chosen in by hypervolume_subset; in that order. The rest are "above".
std::vector<size_t> motpe_below(const std::vector<Loss>& points, size_t n_below);

// MOTPE's weight of each "below" point in l(x): its share of the set's hypervolume (what the set
// loses without it, +1e-12), over the largest; 1 for a single point.
std::vector<double> motpe_below_weights(const std::vector<Loss>& below);

// NSGA-II's fronts: the positions of each front in turn, each front in the order of NSGA-II's
// fast non-dominated sort (its swap-and-pop order).
std::vector<std::vector<size_t>> nondominated_fronts(const std::vector<Loss>& points);

// The crowding distance of each of `front` (positions into values), on the values as reported
// (the sum over the objectives of the gap between each point's neighbours over that objective's
// range); `front` is reordered as NSGA-II's crowding sort leaves it: largest distance first.
void crowding_sort(const std::vector<Loss>& values, std::vector<size_t>& front);

}  // namespace precon::orch
