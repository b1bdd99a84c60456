#include "orchestrator/recipe/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace precon::orch {

namespace {

constexpr double kParetoEps = 1e-12;  // MOTPE's EPS: a zero reference coordinate, a contribution's floor
constexpr double kParetoInf = std::numeric_limits<double>::infinity();

// The volume of the box with corners a and b.
double box_volume(const Loss& a, const Loss& b) {
  double v = 1;
  for (size_t d = 0; d < a.size(); ++d) v *= a[d] - b[d];
  return std::abs(v);
}

// Two objectives: the slices between consecutive points, sorted by the first objective.
double hypervolume_2d(std::vector<Loss> points, Loss reference) {
  std::stable_sort(points.begin(), points.end(), [](const Loss& a, const Loss& b) {
    return a[0] != b[0] ? a[0] < b[0] : a[1] > b[1];
  });
  double volume = 0;
  for (const Loss& p : points) {
    if (reference[1] < p[1]) continue;
    volume += box_volume(reference, p);
    reference[1] = p[1];
  }
  return volume;
}

double wfg(std::vector<Loss> points, const Loss& reference);

// What `point` adds to the boxes of `rest`: its box less the part the others, limited to it, cover.
double exclusive_volume(const Loss& point, const std::vector<Loss>& rest, const Loss& reference) {
  double volume = box_volume(point, reference);
  std::vector<Loss> limited;
  for (const Loss& r : rest) {
    Loss l(r.size());
    for (size_t d = 0; d < r.size(); ++d) l[d] = std::max(r[d], point[d]);
    limited.push_back(std::move(l));
  }
  if (limited.size() > 1) {
    // Only the points not dominated by the one kept before them (the points arrive sorted).
    std::vector<Loss> kept = {limited[0]};
    size_t left = 0;
    for (size_t right = 1; right < limited.size(); ++right) {
      bool worse_somewhere = false;
      for (size_t d = 0; d < limited[left].size(); ++d) worse_somewhere |= limited[left][d] > limited[right][d];
      if (worse_somewhere) {
        left = right;
        kept.push_back(limited[left]);
      }
    }
    limited = std::move(kept);
  }
  if (limited.size() == 1) volume -= box_volume(limited[0], reference);
  else if (limited.size() > 1) volume -= wfg(std::move(limited), reference);
  return volume;
}

double wfg(std::vector<Loss> points, const Loss& reference) {
  if (reference.size() == 2) return hypervolume_2d(std::move(points), reference);
  if (points.empty()) return 0;
  if (points.size() == 1) return box_volume(points[0], reference);
  if (points.size() == 2) {
    Loss corner(reference.size());
    for (size_t d = 0; d < corner.size(); ++d) corner[d] = reference[d] - std::max(points[0][d], points[1][d]);
    double both = 1;
    for (double c : corner) both *= c;
    return box_volume(points[0], reference) + box_volume(points[1], reference) - both;
  }
  std::stable_sort(points.begin(), points.end(), [](const Loss& a, const Loss& b) { return a[0] < b[0]; });
  double volume = 0;
  for (size_t i = 0; i < points.size(); ++i)
    volume += exclusive_volume(points[i], std::vector<Loss>(points.begin() + static_cast<std::ptrdiff_t>(i) + 1, points.end()),
                               reference);
  return volume;
}

}  // namespace

bool pareto_dominates(const Loss& a, const Loss& b) {
  bool better = false;
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d] > b[d]) return false;
    better |= a[d] < b[d];
  }
  return better;
}

std::vector<int> nondomination_ranks(const std::vector<Loss>& points) {
  const size_t n = points.size();
  std::vector<int> rank(n, -1);
  size_t unranked = n;
  for (int r = 0; unranked > 0; ++r) {
    std::vector<size_t> now;
    for (size_t i = 0; i < n; ++i) {
      if (rank[i] != -1) continue;
      bool dominated = false;
      for (size_t j = 0; j < n && !dominated; ++j) dominated = rank[j] == -1 && pareto_dominates(points[j], points[i]);
      if (!dominated) now.push_back(i);
    }
    for (size_t i : now) rank[i] = r;
    unranked -= now.size();
  }
  return rank;
}

double hypervolume(const std::vector<Loss>& points, const Loss& reference) { return wfg(points, reference); }

Loss hypervolume_reference(const std::vector<Loss>& points) {
  Loss worst = points.front();
  for (const Loss& p : points)
    for (size_t d = 0; d < p.size(); ++d) worst[d] = std::max(worst[d], p[d]);
  for (double& w : worst) {
    w = std::max(1.1 * w, 0.9 * w);
    if (w == 0) w = kParetoEps;
  }
  return worst;
}

std::vector<size_t> hypervolume_subset(const std::vector<Loss>& points, size_t k, const Loss& reference) {
  std::vector<double> gain(points.size());
  for (size_t i = 0; i < points.size(); ++i) gain[i] = wfg({points[i]}, reference);
  std::vector<Loss> chosen;
  std::vector<size_t> out;
  double chosen_volume = 0;
  while (out.size() < k) {
    const size_t best = static_cast<size_t>(std::max_element(gain.begin(), gain.end()) - gain.begin());
    gain[best] = -1;  // chosen
    for (size_t j = 0; j < points.size(); ++j) {
      if (gain[j] == -1) continue;
      Loss overlap(points[j].size());
      for (size_t d = 0; d < overlap.size(); ++d) overlap[d] = std::max(points[best][d], points[j][d]);
      std::vector<Loss> with = chosen;
      with.push_back(std::move(overlap));
      gain[j] -= wfg(with, reference) - chosen_volume;
    }
    chosen.push_back(points[best]);
    out.push_back(best);
    chosen_volume = wfg(chosen, reference);
  }
  return out;
}

std::vector<size_t> motpe_below(const std::vector<Loss>& points, size_t n_below) {
  n_below = std::min(n_below, points.size());
  const std::vector<int> rank = nondomination_ranks(points);
  auto of_rank = [&](int r) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < points.size(); ++i)
      if (rank[i] == r) idx.push_back(i);
    return idx;
  };
  std::vector<size_t> below;
  int r = 0;
  while (below.size() < n_below) {
    const std::vector<size_t> idx = of_rank(r);
    if (idx.empty() || below.size() + idx.size() > n_below) break;
    below.insert(below.end(), idx.begin(), idx.end());
    ++r;
  }
  if (below.size() < n_below) {
    const std::vector<size_t> idx = of_rank(r);
    std::vector<Loss> sub;
    for (size_t i : idx) sub.push_back(points[i]);
    for (size_t s : hypervolume_subset(sub, n_below - below.size(), hypervolume_reference(sub))) below.push_back(idx[s]);
  }
  return below;
}

std::vector<double> motpe_below_weights(const std::vector<Loss>& below) {
  if (below.size() <= 1) return std::vector<double>(below.size(), 1.0);
  const Loss reference = hypervolume_reference(below);
  const double total = wfg(below, reference);
  std::vector<double> c(below.size());
  for (size_t i = 0; i < below.size(); ++i) {
    std::vector<Loss> without;
    for (size_t j = 0; j < below.size(); ++j)
      if (j != i) without.push_back(below[j]);
    c[i] = total - wfg(without, reference) + kParetoEps;
  }
  const double top = *std::max_element(c.begin(), c.end());
  for (double& w : c) w = std::clamp(w / top, 0.0, 1.0);
  return c;
}

std::vector<std::vector<size_t>> nondominated_fronts(const std::vector<Loss>& points) {
  const size_t n = points.size();
  std::vector<size_t> dominated_count(n, 0);
  std::vector<std::vector<size_t>> dominates(n);
  for (size_t p = 0; p < n; ++p)
    for (size_t q = p + 1; q < n; ++q) {
      if (pareto_dominates(points[p], points[q])) {
        dominates[p].push_back(q);
        ++dominated_count[q];
      } else if (pareto_dominates(points[q], points[p])) {
        dominates[q].push_back(p);
        ++dominated_count[p];
      }
    }
  std::vector<size_t> population(n);
  std::iota(population.begin(), population.end(), 0);
  std::vector<std::vector<size_t>> fronts;
  while (!population.empty()) {
    std::vector<size_t> front;
    for (size_t i = 0; i < population.size();) {
      if (dominated_count[population[i]] != 0) {
        ++i;
        continue;
      }
      front.push_back(population[i]);
      // NSGA-II's order: the last one takes the chosen one's place.
      population[i] = population.back();
      population.pop_back();
    }
    for (size_t x : front)
      for (size_t y : dominates[x]) --dominated_count[y];
    fronts.push_back(std::move(front));
  }
  return fronts;
}

void crowding_sort(const std::vector<Loss>& values, std::vector<size_t>& front) {
  std::vector<double> distance(values.size(), 0.0);
  if (!front.empty()) {
    for (size_t d = 0; d < values[front[0]].size(); ++d) {
      std::stable_sort(front.begin(), front.end(), [&](size_t a, size_t b) { return values[a][d] < values[b][d]; });
      if (values[front.front()][d] == values[front.back()][d]) continue;
      std::vector<double> vs = {-kParetoInf};
      for (size_t i : front) vs.push_back(values[i][d]);
      vs.push_back(kParetoInf);
      const double v_min = *std::find_if(vs.begin(), vs.end(), [](double x) { return x != -kParetoInf; });
      const double v_max = *std::find_if(vs.rbegin(), vs.rend(), [](double x) { return x != kParetoInf; });
      double width = v_max - v_min;
      if (!(width > 0)) width = 1.0;
      for (size_t j = 0; j < front.size(); ++j) {
        const double gap = vs[j] == vs[j + 2] ? 0.0 : vs[j + 2] - vs[j];
        distance[front[j]] += gap / width;
      }
    }
  }
  std::stable_sort(front.begin(), front.end(), [&](size_t a, size_t b) { return distance[a] < distance[b]; });
  std::reverse(front.begin(), front.end());
}

}  // namespace precon::orch
