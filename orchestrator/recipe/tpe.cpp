#include "orchestrator/recipe/tpe.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include "orchestrator/recipe/pareto.h"

namespace precon::orch {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSigma0Magnitude = 0.2;  // Scott's rule constant of the multivariate bandwidth (BOHB's)
const double kLogSqrt2Pi = 0.5 * std::log(2 * M_PI);

// Φ(a) by erf or erfc, whichever keeps its digits.
double ndtr(double a) {
  const double x = a / std::sqrt(2.0);
  if (x < -1 / std::sqrt(2.0)) return 0.5 * std::erfc(-x);
  if (x < 1 / std::sqrt(2.0)) return 0.5 + 0.5 * std::erf(x);
  return 1.0 - 0.5 * std::erfc(x);
}

// log Φ(a); far in the left tail by the asymptotic series (Φ underflows there).
double log_ndtr(double a) {
  if (a > 6) return -ndtr(-a);
  if (a > -20) return std::log(ndtr(a));
  const double log_lhs = -0.5 * a * a - std::log(-a) - kLogSqrt2Pi;
  double last = 0, total = 1, numerator = 1, denom = 1, sign = 1;
  for (int i = 1; std::abs(last - total) > DBL_EPSILON; ++i) {
    last = total;
    sign = -sign;
    denom *= 1 / (a * a);
    numerator *= 2 * i - 1;
    total += sign * numerator * denom;
  }
  return log_lhs + std::log(total);
}

double log_diff(double log_p, double log_q) { return log_p + std::log1p(-std::exp(log_q - log_p)); }

double log_add(double a, double b) {
  const double m = std::max(a, b);
  if (m == -kInf) return -kInf;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

// log of the standard normal's mass in [a, b]; each tail from its own side, where it is exact.
double log_gauss_mass(double a, double b) {
  if (b <= 0) return log_diff(log_ndtr(b), log_ndtr(a));
  if (a > 0) return log_diff(log_ndtr(-a), log_ndtr(-b));
  return std::log1p(-(0.5 + 0.5 * std::erf(a / std::sqrt(2.0))) - (0.5 + 0.5 * std::erf(-b / std::sqrt(2.0))));
}

// x with log Φ(x) = y, by bisection (log Φ is increasing).
double ndtri_exp(double y) {
  double a = -100, b = 100, m = 0;
  for (int i = 0; i < 100; ++i) {
    m = (a + b) / 2;
    if (log_ndtr(m) < y) a = m;
    else b = m;
  }
  return m;
}

// A draw of the standard normal truncated to [a, b], by inverting its CDF in log space.
double truncnorm_draw(double a, double b, double u) {
  const double mass = log_gauss_mass(a, b);
  if (a < 0) return ndtri_exp(log_add(log_ndtr(a), std::log(u) + mass));
  return -ndtri_exp(log_add(log_ndtr(-b), std::log1p(-u) + mass));
}

bool numeric(const TpeParam& p) { return p.kind != TpeParam::categorical; }

double to_scaled(const TpeParam& p, double x) { return p.kind == TpeParam::real && p.log ? std::log(x) : x; }

double from_scaled(const TpeParam& p, double x) {
  if (p.kind == TpeParam::real && p.log) return std::clamp(std::exp(x), p.lo, p.hi);
  const double q = p.kind == TpeParam::integer ? std::max(p.step, 1.0) : p.step;
  if (p.kind == TpeParam::categorical || q <= 0) return x;
  return std::clamp(std::round((x - p.lo) / q) * q + p.lo, p.lo, p.hi);
}

}  // namespace

std::vector<double> tpe_default_weights(size_t n) {
  if (n < 25) return std::vector<double>(n, 1.0);
  std::vector<double> w(n, 1.0);
  const size_t ramp = n - 25;
  // numpy's linspace(1/n, 1, ramp): the end points exact, the inner ones start + i·step.
  const double start = 1.0 / static_cast<double>(n);
  const double delta = 1.0 - start;
  for (size_t i = 0; i < ramp; ++i) {
    if (ramp == 1) {
      w[i] = start;
      break;
    }
    const double step = delta / static_cast<double>(ramp - 1);
    w[i] = i + 1 == ramp ? 1.0 : start + static_cast<double>(i) * step;
  }
  return w;
}

int64_t tpe_gamma(int64_t n) {
  return std::min<int64_t>(static_cast<int64_t>(std::ceil(0.1 * static_cast<double>(n))), 25);
}

ParzenEstimator::ParzenEstimator(const std::vector<TpeParam>& space, const std::vector<std::vector<double>>& observations,
                                 const worker::TpeSettings& settings, const std::vector<double>* weights)
    : space_(space) {
  const size_t n = observations.size();
  std::vector<double> w = weights ? *weights : tpe_default_weights(n);
  w.push_back(settings.prior_weight);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= total;
  weights_ = std::move(w);
  const size_t dims = space_.size();
  low_.assign(dims, 0);
  high_.assign(dims, 0);
  q_.assign(dims, 0);
  mus_.resize(dims);
  sigmas_.resize(dims);
  categorical_.resize(dims);
  // Scott's rule, shared by every kernel of every numeric dimension (scaled by its range).
  const double sigma0 = kSigma0Magnitude * std::pow(static_cast<double>(std::max<size_t>(n, 1)),
                                                    -1.0 / (static_cast<double>(dims) + 4));
  for (size_t d = 0; d < dims; ++d) {
    const TpeParam& p = space_[d];
    if (!numeric(p)) {
      // Each kernel: its observed choice gets 1 more than the prior's share prior_weight/(n+1).
      const auto k = static_cast<size_t>(p.choices);
      const double base = settings.prior_weight / static_cast<double>(n + 1);
      categorical_[d].assign(n + 1, std::vector<double>(k, base));
      for (size_t i = 0; i < n; ++i) categorical_[d][i][static_cast<size_t>(observations[i][d])] += 1;
      for (auto& row : categorical_[d]) {
        const double s = std::accumulate(row.begin(), row.end(), 0.0);
        for (double& x : row) x /= s;
      }
      continue;
    }
    double low = 0, high = 0, q = 0;
    if (p.kind == TpeParam::real && p.log) {
      low = std::log(p.lo);
      high = std::log(p.hi);
    } else if (p.kind == TpeParam::integer || p.step > 0) {
      q = p.kind == TpeParam::integer ? std::max(p.step, 1.0) : p.step;
      low = p.lo - 0.5 * q;
      high = p.hi + 0.5 * q;
    } else {
      low = p.lo;
      high = p.hi;
    }
    low_[d] = low;
    high_[d] = high;
    q_[d] = q;
    std::vector<double> mus(n + 1);
    for (size_t i = 0; i < n; ++i) mus[i] = to_scaled(p, observations[i][d]);
    mus[n] = 0.5 * (low + high);
    std::vector<double> sigmas(n + 1);
    if (settings.multivariate) {
      std::fill(sigmas.begin(), sigmas.end(), sigma0 * (high - low));
    } else {
      // Each kernel as wide as the larger gap to its neighbours (the range's ends count).
      std::vector<size_t> order(n + 1);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mus[a] < mus[b]; });
      std::vector<double> with_ends;
      with_ends.push_back(low);
      for (size_t i : order) with_ends.push_back(mus[i]);
      with_ends.push_back(high);
      std::vector<double> sorted(n + 1);
      for (size_t i = 0; i <= n; ++i)
        sorted[i] = std::max(with_ends[i + 1] - with_ends[i], with_ends[i + 2] - with_ends[i + 1]);
      if (!settings.consider_endpoints && with_ends.size() >= 4) {
        sorted[0] = with_ends[2] - with_ends[1];
        sorted[n] = with_ends[n + 1] - with_ends[n];
      }
      for (size_t i = 0; i <= n; ++i) sigmas[order[i]] = sorted[i];
    }
    // The magic clip: no kernel narrower than range / min(100, kernels + 1).
    const double max_sigma = high - low;
    const double min_sigma = (high - low) / std::min(100.0, 1.0 + static_cast<double>(n + 1));
    for (double& s : sigmas) s = std::clamp(s, min_sigma, max_sigma);
    sigmas[n] = high - low;  // the prior: centred, as wide as the range
    mus_[d] = std::move(mus);
    sigmas_[d] = std::move(sigmas);
  }
}

double ParzenEstimator::log_pdf(const std::vector<double>& x) const {
  const size_t kernels = weights_.size();
  std::vector<double> component(kernels, 0.0);
  for (size_t d = 0; d < space_.size(); ++d) {
    const TpeParam& p = space_[d];
    if (!numeric(p)) {
      const auto c = static_cast<size_t>(x[d]);
      for (size_t k = 0; k < kernels; ++k) component[k] += std::log(categorical_[d][k][c]);
      continue;
    }
    const double v = to_scaled(p, x[d]);
    const double low = low_[d], high = high_[d], q = q_[d];
    for (size_t k = 0; k < kernels; ++k) {
      const double mu = mus_[d][k], s = sigmas_[d][k];
      const double norm = log_gauss_mass((low - mu) / s, (high - mu) / s);
      if (q > 0) {
        // The mass of the point's cell [v - q/2, v + q/2] within the range.
        const double upper = std::min(v + q / 2, high), lower = std::max(v - q / 2, low);
        component[k] += log_gauss_mass((lower - mu) / s, (upper - mu) / s) - norm;
      } else if (v < low || v > high) {
        component[k] = -kInf;
      } else {
        const double z = (v - mu) / s;
        component[k] += -0.5 * z * z - kLogSqrt2Pi - norm - std::log(s);
      }
    }
  }
  double top = -kInf;
  for (size_t k = 0; k < kernels; ++k) {
    component[k] += std::log(weights_[k]);
    top = std::max(top, component[k]);
  }
  if (top == -kInf) return -kInf;
  double sum = 0;
  for (double c : component) sum += std::exp(c - top);
  return std::log(sum) + top;
}

std::vector<std::vector<double>> ParzenEstimator::sample(Rng& rng, size_t n) const {
  std::vector<double> cumulative(weights_.size());
  std::partial_sum(weights_.begin(), weights_.end(), cumulative.begin());
  auto pick = [&](const std::vector<double>& cum) {
    const double u = rng.uniform01() * cum.back();
    return static_cast<size_t>(std::upper_bound(cum.begin(), cum.end() - 1, u) - cum.begin());
  };
  std::vector<std::vector<double>> out(n, std::vector<double>(space_.size()));
  for (size_t i = 0; i < n; ++i) {
    const size_t k = pick(cumulative);
    for (size_t d = 0; d < space_.size(); ++d) {
      const TpeParam& p = space_[d];
      if (!numeric(p)) {
        std::vector<double> cum(categorical_[d][k].size());
        std::partial_sum(categorical_[d][k].begin(), categorical_[d][k].end(), cum.begin());
        out[i][d] = static_cast<double>(pick(cum));
        continue;
      }
      const double mu = mus_[d][k], s = sigmas_[d][k];
      double u = rng.uniform01();
      if (u <= 0) u = 0x1.0p-53;
      const double z = truncnorm_draw((low_[d] - mu) / s, (high_[d] - mu) / s, u);
      out[i][d] = from_scaled(p, std::clamp(z * s + mu, low_[d], high_[d]));
    }
  }
  return out;
}

std::vector<size_t> tpe_rank(const std::vector<TpeObservation>& trials, bool maximize) {
  // Optuna's (-step, signed value) key: complete trials at -inf, pruned at -(last step), a pruned
  // trial without a value at +1, running ones at +inf.
  auto key = [&](const TpeObservation& t) -> std::pair<double, double> {
    const double sign = maximize ? -1.0 : 1.0;
    switch (t.state) {
      case TpeObservation::complete: return {-kInf, sign * t.value};
      case TpeObservation::pruned:
        if (t.step < 0) return {1.0, 0.0};
        return {-static_cast<double>(t.step), std::isnan(t.value) ? kInf : sign * t.value};
      case TpeObservation::running: return {kInf, kInf};
    }
    return {kInf, kInf};
  };
  std::vector<size_t> order(trials.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(trials[a]) < key(trials[b]); });
  return order;
}

std::vector<double> tpe_random_point(const std::vector<TpeParam>& space, Rng& rng) {
  std::vector<double> x;
  for (const TpeParam& p : space) {
    if (p.kind == TpeParam::categorical) {
      x.push_back(static_cast<double>(rng.below(static_cast<uint64_t>(p.choices))));
    } else if (p.kind == TpeParam::integer || p.step > 0) {
      const double q = p.kind == TpeParam::integer ? std::max(p.step, 1.0) : p.step;
      // Cells lo + k·q; a span past 2^62 (an int64 range of a command's own key) drawn in doubles.
      const double span = std::round((p.hi - p.lo) / q);
      const double k = span < 0x1p62 ? static_cast<double>(rng.below(static_cast<uint64_t>(span) + 1))
                                     : std::floor(rng.uniform01() * (span + 1));
      x.push_back(std::min(p.lo + k * q, p.hi));
    } else if (p.log) {
      const double a = std::log(p.lo), b = std::log(p.hi);
      x.push_back(std::clamp(std::exp(a + rng.uniform01() * (b - a)), p.lo, p.hi));
    } else {
      x.push_back(std::clamp(p.lo + rng.uniform01() * (p.hi - p.lo), p.lo, p.hi));
    }
  }
  return x;
}

namespace {

// One estimator pair over the dimensions `dims` of the space: the below and above trials that
// have them, candidates from l, the best log l − log g.
void propose_group(const std::vector<TpeParam>& space, const std::vector<size_t>& dims,
                   const std::vector<TpeObservation>& trials, const std::vector<size_t>& below,
                   const std::vector<size_t>& above, const std::vector<double>* below_weights,
                   const worker::TpeSettings& settings, Rng& rng, TpeProposal& out) {
  std::vector<TpeParam> sub;
  for (size_t d : dims) sub.push_back(space[d]);
  auto points = [&](const std::vector<size_t>& which) {
    std::vector<std::vector<double>> pts;
    for (size_t i : which) {
      if (std::isnan(trials[i].x[dims.front()])) continue;
      std::vector<double> p;
      for (size_t d : dims) p.push_back(trials[i].x[d]);
      pts.push_back(std::move(p));
    }
    return pts;
  };
  // MOTPE's weights follow the below trials that have these dimensions.
  std::vector<double> kept_weights;
  if (below_weights)
    for (size_t k = 0; k < below.size(); ++k)
      if (!std::isnan(trials[below[k]].x[dims.front()])) kept_weights.push_back((*below_weights)[k]);
  const ParzenEstimator l(sub, points(below), settings, below_weights ? &kept_weights : nullptr);
  const ParzenEstimator g(sub, points(above), settings);
  const std::vector<std::vector<double>> candidates = l.sample(rng, static_cast<size_t>(settings.n_ei_candidates));
  double best = -kInf;
  size_t best_i = 0;
  double best_l = 0, best_g = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double ll = l.log_pdf(candidates[i]), lg = g.log_pdf(candidates[i]);
    if (i == 0 || ll - lg > best) {
      best = ll - lg;
      best_i = i;
      best_l = ll;
      best_g = lg;
    }
  }
  for (size_t j = 0; j < dims.size(); ++j) out.x[dims[j]] = candidates[best_i][j];
  out.log_l += best_l;
  out.log_g += best_g;
}

}  // namespace

TpeProposal tpe_propose(const std::vector<TpeParam>& space, const std::vector<TpeObservation>& trials,
                        const worker::TpeSettings& settings, bool maximize, Rng& rng) {
  TpeProposal out;
  const bool multi = std::any_of(trials.begin(), trials.end(), [](const TpeObservation& t) { return t.losses.size() > 1; });
  std::vector<TpeObservation> used;
  for (const TpeObservation& t : trials)
    if (multi ? t.state == TpeObservation::complete : t.state != TpeObservation::running || settings.constant_liar)
      used.push_back(t);
  int64_t finished = 0;
  for (const TpeObservation& t : used) finished += t.state != TpeObservation::running;
  if (finished < settings.n_startup_trials || space.empty()) {
    out.x = tpe_random_point(space, rng);
    out.random = true;
    return out;
  }
  const auto n_below = static_cast<size_t>(std::min<int64_t>(tpe_gamma(finished), static_cast<int64_t>(used.size())));
  std::vector<size_t> below, above;
  std::vector<double> below_weights;
  if (multi) {
    std::vector<Loss> losses;
    for (const TpeObservation& t : used) losses.push_back(t.losses);
    below = motpe_below(losses, n_below);
    std::vector<Loss> below_losses;
    for (size_t i : below) below_losses.push_back(losses[i]);
    below_weights = motpe_below_weights(below_losses);
    for (size_t i = 0; i < used.size(); ++i)
      if (std::find(below.begin(), below.end(), i) == below.end()) above.push_back(i);
  } else {
    const std::vector<size_t> ranked = tpe_rank(used, maximize);
    below.assign(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n_below));
    above.assign(ranked.begin() + static_cast<std::ptrdiff_t>(n_below), ranked.end());
    // Each estimator weighs its kernels by age: trial order.
    std::sort(below.begin(), below.end());
    std::sort(above.begin(), above.end());
  }
  const std::vector<double>* weights = multi ? &below_weights : nullptr;
  out.x.assign(space.size(), 0.0);
  if (settings.multivariate) {
    std::vector<size_t> all(space.size());
    std::iota(all.begin(), all.end(), 0);
    propose_group(space, all, used, below, above, weights, settings, rng, out);
  } else {
    for (size_t d = 0; d < space.size(); ++d) propose_group(space, {d}, used, below, above, weights, settings, rng, out);
  }
  return out;
}

}  // namespace precon::orch
