#include "orchestrator/study/importance.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

namespace precon::study {
namespace {

using Range = std::array<double, 2>;
using Space = std::vector<Range>;  // one range per column

struct Node {
  int feature = -1;  // -1: a leaf
  double threshold = 0.0;
  int left = -1, right = -1;
  double value = 0.0;  // the mean objective of the node's samples
};
using Tree = std::vector<Node>;  // preorder: a parent before its children

// The trials as columns: x[row][column], y[row].
struct Table {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  size_t columns = 0;
};

// CART regression on squared error, every column considered at every split.
class TreeGrower {
 public:
  TreeGrower(const Table& t, int64_t max_depth) : t_(t), max_depth_(max_depth) {}

  Tree grow(std::vector<int> rows) {
    tree_.clear();
    node(rows, 0);
    return std::move(tree_);
  }

 private:
  int node(std::vector<int>& rows, int64_t depth) {
    const int id = static_cast<int>(tree_.size());
    tree_.emplace_back();
    double sum = 0.0;
    for (int r : rows) sum += t_.y[r];
    const double n = static_cast<double>(rows.size());
    tree_[id].value = sum / n;
    if (rows.size() < 2 || depth >= max_depth_) return id;
    const auto [lo_y, hi_y] = std::minmax_element(rows.begin(), rows.end(), [&](int a, int b) { return t_.y[a] < t_.y[b]; });
    if (t_.y[*lo_y] == t_.y[*hi_y]) return id;  // nothing to explain

    // The best cut maximises sum_l²/n_l + sum_r²/n_r (the squared error's reduction up to a constant).
    int best_feature = -1;
    double best_score = -std::numeric_limits<double>::infinity(), best_threshold = 0.0;
    std::vector<int> order = rows;
    for (size_t f = 0; f < t_.columns; ++f) {
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t_.x[a][f] < t_.x[b][f]; });
      double left = 0.0;
      for (size_t k = 1; k < order.size(); ++k) {
        left += t_.y[order[k - 1]];
        const double a = t_.x[order[k - 1]][f], b = t_.x[order[k]][f];
        if (!(a < b)) continue;  // no cut between equal values
        const double nl = static_cast<double>(k), nr = n - nl;
        const double score = left * left / nl + (sum - left) * (sum - left) / nr;
        if (score > best_score) {
          best_score = score;
          best_feature = static_cast<int>(f);
          best_threshold = a + (b - a) / 2.0;
          if (best_threshold == b) best_threshold = a;  // the midpoint rounded up onto b
        }
      }
    }
    if (best_feature < 0) return id;  // every column constant here
    std::vector<int> left_rows, right_rows;
    for (int r : rows) (t_.x[r][best_feature] <= best_threshold ? left_rows : right_rows).push_back(r);
    const int l = node(left_rows, depth + 1);
    const int r = node(right_rows, depth + 1);
    tree_[id].feature = best_feature;
    tree_[id].threshold = best_threshold;
    tree_[id].left = l;
    tree_[id].right = r;
    return id;
  }

  const Table& t_;
  int64_t max_depth_;
  Tree tree_;
};

double volume(const Space& s) {
  double v = 1.0;
  for (const Range& r : s) v *= r[1] - r[0];
  return v;
}

// Weighted mean and variance (numpy.average's).
std::pair<double, double> weighted_moments(const std::vector<double>& values, const std::vector<double>& weights) {
  const double w = std::accumulate(weights.begin(), weights.end(), 0.0);
  double mean = 0.0;
  for (size_t i = 0; i < values.size(); ++i) mean += values[i] * weights[i];
  mean /= w;
  double var = 0.0;
  for (size_t i = 0; i < values.size(); ++i) var += (values[i] - mean) * (values[i] - mean) * weights[i];
  return {mean, var / w};
}

// One tree's functional ANOVA: the marginal prediction over a set of columns and its variance.
class FanovaTree {
 public:
  FanovaTree(Tree tree, Space space) : tree_(std::move(tree)), space_(std::move(space)) {
    const size_t n = tree_.size(), cols = space_.size();
    // Each node's subspace; the leaves' mean and volume; inner nodes the volume-weighted mean.
    std::vector<Space> sub(n);
    sub[0] = space_;
    value_.assign(n, 0.0);
    weight_.assign(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const Node& nd = tree_[i];
      if (nd.feature < 0) {
        value_[i] = nd.value;
        weight_[i] = volume(sub[i]);
        continue;
      }
      sub[nd.left] = sub[i];
      sub[nd.left][nd.feature][1] = nd.threshold;
      sub[nd.right] = sub[i];
      sub[nd.right][nd.feature][0] = nd.threshold;
    }
    active_.assign(n, std::vector<char>(cols, 0));
    for (size_t i = n; i-- > 0;) {
      const Node& nd = tree_[i];
      if (nd.feature < 0) continue;
      const double wl = weight_[nd.left], wr = weight_[nd.right];
      weight_[i] = wl + wr;
      value_[i] = (value_[nd.left] * wl + value_[nd.right] * wr) / (wl + wr);
      active_[i][nd.feature] = 1;
      for (size_t c = 0; c < cols; ++c) active_[i][c] |= active_[nd.left][c] | active_[nd.right][c];
    }
    // The cells each column's cuts make: their midpoints and widths.
    std::vector<std::set<double>> cuts(cols);
    for (const Node& nd : tree_)
      if (nd.feature >= 0) cuts[nd.feature].insert(nd.threshold);
    midpoints_.resize(cols);
    sizes_.resize(cols);
    for (size_t c = 0; c < cols; ++c) {
      std::vector<double> edges = {space_[c][0]};
      edges.insert(edges.end(), cuts[c].begin(), cuts[c].end());
      edges.push_back(space_[c][1]);
      for (size_t k = 1; k < edges.size(); ++k) {
        midpoints_[c].push_back(0.5 * (edges[k] + edges[k - 1]));
        sizes_[c].push_back(edges[k] - edges[k - 1]);
      }
    }
    std::vector<double> leaf_values, leaf_weights;
    for (size_t i = 0; i < n; ++i)
      if (tree_[i].feature < 0) {
        leaf_values.push_back(value_[i]);
        leaf_weights.push_back(weight_[i]);
      }
    variance_ = weighted_moments(leaf_values, leaf_weights).second;
  }

  double variance() const { return variance_; }

  // The variance of the prediction as a function of `columns` alone, the others averaged out.
  double marginal_variance(const std::vector<size_t>& columns) const {
    std::vector<size_t> at(columns.size(), 0);
    std::vector<double> point(space_.size(), std::nan(""));
    std::vector<double> values, weights;
    for (;;) {
      double size = 1.0;
      for (size_t k = 0; k < columns.size(); ++k) {
        point[columns[k]] = midpoints_[columns[k]][at[k]];
        size *= sizes_[columns[k]][at[k]];
      }
      const auto [value, weight] = marginalised(point);
      values.push_back(value);
      weights.push_back(weight * size);
      size_t k = 0;
      for (; k < columns.size(); ++k) {
        if (++at[k] < midpoints_[columns[k]].size()) break;
        at[k] = 0;
      }
      if (k == columns.size()) break;
    }
    return std::max(0.0, weighted_moments(values, weights).second);
  }

 private:
  // The prediction at `point` (NaN: averaged over that column) and its weight.
  std::pair<double, double> marginalised(const std::vector<double>& point) const {
    Space start = space_;
    for (size_t c = 0; c < point.size(); ++c)
      if (std::isnan(point[c])) start[c] = {0.0, 1.0};
    std::vector<std::pair<int, Space>> stack = {{0, start}};
    std::vector<double> values, weights;
    while (!stack.empty()) {
      auto [i, s] = std::move(stack.back());
      stack.pop_back();
      const Node& nd = tree_[i];
      if (nd.feature >= 0) {
        const double x = point[nd.feature];
        if (!std::isnan(x)) {
          const bool left = x <= nd.threshold;
          s[nd.feature][left ? 1 : 0] = nd.threshold;
          stack.emplace_back(left ? nd.left : nd.right, std::move(s));
          continue;
        }
        bool below = false;
        for (size_t c = 0; c < point.size() && !below; ++c) below = !std::isnan(point[c]) && active_[i][c];
        if (below) {
          stack.emplace_back(nd.left, s);
          stack.emplace_back(nd.right, std::move(s));
          continue;
        }
      }
      values.push_back(value_[i]);
      weights.push_back(weight_[i] / volume(s));
    }
    const auto [mean, var] = weighted_moments(values, weights);
    (void)var;
    return {mean, std::accumulate(weights.begin(), weights.end(), 0.0)};
  }

  Tree tree_;
  Space space_;
  std::vector<double> value_, weight_;
  std::vector<std::vector<char>> active_;  // node -> the columns its subtree cuts
  std::vector<std::vector<double>> midpoints_, sizes_;
  double variance_ = 0.0;
};

}  // namespace

std::vector<ParamImportance> fanova_importance(const std::vector<ImportanceParam>& params,
                                               const std::vector<ImportanceTrial>& trials,
                                               const ImportanceSettings& settings) {
  if (trials.size() < 2)
    throw ImportanceError("importance needs 2 or more finished trials with every parameter, got " +
                          std::to_string(trials.size()));
  if (settings.trees < 1 || settings.max_depth < 1) throw ImportanceError("trees and max_depth must be >= 1");
  // Columns: numeric parameters one each, categorical ones a 0/1 column per choice; parameters
  // with a single value none (their importance is 0).
  Space space;
  std::vector<std::vector<size_t>> columns_of(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    const ImportanceParam& q = params[p];
    if (q.categorical) {
      if (q.choices < 2) continue;
      for (int64_t c = 0; c < q.choices; ++c) {
        columns_of[p].push_back(space.size());
        space.push_back({0.0, 1.0});
      }
    } else if (q.hi > q.lo) {
      columns_of[p].push_back(space.size());
      space.push_back({q.lo, q.hi});
    }
  }
  std::vector<ParamImportance> out;
  for (const ImportanceParam& q : params) out.push_back({q.name, 0.0, 0.0});
  if (space.empty()) return out;

  Table table;
  table.columns = space.size();
  for (size_t t = 0; t < trials.size(); ++t) {
    const ImportanceTrial& tr = trials[t];
    if (tr.values.size() != params.size())
      throw ImportanceError("trial " + std::to_string(t) + " has " + std::to_string(tr.values.size()) +
                            " values for " + std::to_string(params.size()) + " parameters");
    if (!std::isfinite(tr.objective)) throw ImportanceError("trial " + std::to_string(t) + ": objective is not finite");
    std::vector<double> row(space.size(), 0.0);
    for (size_t p = 0; p < params.size(); ++p) {
      const ImportanceParam& q = params[p];
      const double v = tr.values[p];
      if (q.categorical) {
        if (!(v >= 0 && v < static_cast<double>(q.choices)) || v != std::floor(v))
          throw ImportanceError(q.name + ": choice " + std::to_string(v) + " of trial " + std::to_string(t) +
                                " is not one of its " + std::to_string(q.choices));
        if (!columns_of[p].empty()) row[columns_of[p][static_cast<size_t>(v)]] = 1.0;
      } else {
        if (!(v >= q.lo && v <= q.hi))
          throw ImportanceError(q.name + ": value " + std::to_string(v) + " of trial " + std::to_string(t) +
                                " is outside its range [" + std::to_string(q.lo) + ", " + std::to_string(q.hi) + "]");
        if (!columns_of[p].empty()) row[columns_of[p][0]] = v;
      }
    }
    table.x.push_back(std::move(row));
    table.y.push_back(tr.objective);
  }

  TreeGrower grower(table, settings.max_depth);
  std::vector<FanovaTree> forest;
  const int n = static_cast<int>(trials.size());
  for (int64_t k = 0; k < settings.trees; ++k) {
    std::mt19937_64 rng(settings.seed * 1000003ULL + static_cast<uint64_t>(k));
    std::uniform_int_distribution<int> pick(0, n - 1);
    std::vector<int> rows(static_cast<size_t>(n));
    for (int& r : rows) r = pick(rng);
    forest.emplace_back(grower.grow(std::move(rows)), space);
  }
  if (std::all_of(forest.begin(), forest.end(), [](const FanovaTree& t) { return t.variance() == 0.0; }))
    throw ImportanceError("the objective does not vary over the trials the forest was grown on: no parameter explains anything");

  double total = 0.0;
  for (size_t p = 0; p < params.size(); ++p) {
    if (columns_of[p].empty()) continue;
    std::vector<double> shares;
    for (const FanovaTree& t : forest)
      if (t.variance() > 0.0) shares.push_back(t.marginal_variance(columns_of[p]) / t.variance());
    const double mean = std::accumulate(shares.begin(), shares.end(), 0.0) / static_cast<double>(shares.size());
    double var = 0.0;
    for (double s : shares) var += (s - mean) * (s - mean);
    out[p].importance = mean;
    out[p].spread = std::sqrt(var / static_cast<double>(shares.size()));
    total += mean;
  }
  if (total > 0.0)
    for (ParamImportance& i : out) i.importance /= total;
  std::stable_sort(out.begin(), out.end(), [](const ParamImportance& a, const ParamImportance& b) {
    return a.importance > b.importance;
  });
  return out;
}

}  // namespace precon::study
