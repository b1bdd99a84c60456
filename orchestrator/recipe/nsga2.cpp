#include "orchestrator/recipe/nsga2.h"

#include <algorithm>
#include <cmath>

namespace precon::orch {

std::vector<size_t> nsga2_elite(const std::vector<Loss>& losses, const std::vector<Loss>& values,
                                const std::vector<size_t>& population, size_t size) {
  std::vector<Loss> sub_losses, sub_values;
  for (size_t i : population) {
    sub_losses.push_back(losses[i]);
    sub_values.push_back(values.empty() ? losses[i] : values[i]);
  }
  std::vector<size_t> elite;
  for (std::vector<size_t>& front : nondominated_fronts(sub_losses)) {
    if (elite.size() + front.size() < size) {
      for (size_t i : front) elite.push_back(population[i]);
      continue;
    }
    crowding_sort(sub_values, front);
    const size_t room = size - elite.size();
    for (size_t k = 0; k < room && k < front.size(); ++k) elite.push_back(population[front[k]]);
    break;
  }
  // (nondominated_fronts' order leaves the fitting whole fronts as NSGA-II's sort does.)
  return elite;
}

namespace {

// The trial's loss vector dominates: a binary tournament's winner.
size_t nsga2_tournament(const std::vector<NsgaTrial>& trials, const std::vector<size_t>& pool, Rng& rng) {
  const size_t a = pool[rng.below(pool.size())];
  const size_t b = pool[rng.below(pool.size())];
  return pareto_dominates(trials[a].losses, trials[b].losses) ? a : b;
}

std::vector<double> nsga2_child(const std::vector<TpeParam>& space, const std::vector<NsgaTrial>& trials,
                                const std::vector<size_t>& parents, const worker::NsgaSettings& settings, Rng& rng) {
  std::vector<double> child;
  if (parents.size() >= 2 && rng.uniform01() < settings.crossover_prob) {
    const size_t first = nsga2_tournament(trials, parents, rng);
    std::vector<size_t> rest;
    for (size_t p : parents)
      if (p != first) rest.push_back(p);
    const size_t second = nsga2_tournament(trials, rest, rng);
    for (size_t d = 0; d < space.size(); ++d)
      child.push_back(rng.uniform01() >= settings.swapping_prob ? trials[second].x[d] : trials[first].x[d]);
  } else {
    child = trials[parents[rng.below(parents.size())]].x;
  }
  const double mutation = settings.mutation_prob > 0 ? settings.mutation_prob
                                                     : 1.0 / std::max<double>(1.0, static_cast<double>(space.size()));
  const std::vector<double> fresh = tpe_random_point(space, rng);
  for (size_t d = 0; d < space.size(); ++d)
    if (rng.uniform01() < mutation) child[d] = fresh[d];
  return child;
}

}  // namespace

std::vector<double> nsga2_propose(const std::vector<TpeParam>& space, const std::vector<NsgaTrial>& trials, int64_t index,
                                  const worker::NsgaSettings& settings, Rng& rng) {
  const auto size = static_cast<size_t>(std::max<int64_t>(settings.population_size, 2));
  const auto generation = static_cast<size_t>(index) / size;
  std::vector<Loss> losses, values;
  for (const NsgaTrial& t : trials) {
    losses.push_back(t.losses);
    values.push_back(t.values.empty() ? t.losses : t.values);
  }
  // The parents of each generation in turn: its elder generation's complete trials, then their parents.
  std::vector<size_t> parents;
  for (size_t g = 0; g < generation; ++g) {
    std::vector<size_t> population;
    for (size_t i = g * size; i < std::min(trials.size(), (g + 1) * size); ++i) {
      const NsgaTrial& t = trials[i];
      const bool finite = std::all_of(t.losses.begin(), t.losses.end(), [](double v) { return std::isfinite(v); });
      if (t.complete && !t.losses.empty() && finite) population.push_back(i);
    }
    population.insert(population.end(), parents.begin(), parents.end());
    if (!population.empty()) parents = nsga2_elite(losses, values, population, size);
  }
  auto taken = [&](const std::vector<double>& x) {
    return std::any_of(trials.begin(), trials.end(), [&](const NsgaTrial& t) { return t.x == x; });
  };
  if (!parents.empty()) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::vector<double> child = nsga2_child(space, trials, parents, settings, rng);
      if (!taken(child)) return child;
    }
  }
  // Generation 0 (or no parent yet): a random point, drawn anew while it repeats a trial.
  std::vector<double> x = tpe_random_point(space, rng);
  for (int attempt = 0; attempt < 100 && taken(x); ++attempt) x = tpe_random_point(space, rng);
  return x;
}

}  // namespace precon::orch
