// The fit of fit.h. Everything runs in log units: x = log C, y = log L, and each arm's reducible
// loss as log(L - E) = b - alpha * (x - x0) with x0 the arm's mean log compute, so that b stays
// of order one whatever the FLOPs (1e22 and more) and log A = b + alpha * x0 is only formed for
// the report. The multiplier is formed from logs as well: L* - E comes out of the curve without a
// subtraction, so it cannot cancel.
#include "orchestrator/study/fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>

namespace precon::study {

namespace {

constexpr double kAlphaMin = 1e-6;
constexpr int kGrid = 100;  // E grid points on [0, min loss)

// One arm's points, ready for the fit.
struct ArmData {
  std::vector<double> x;  // log compute
  std::vector<double> y;  // log loss
  double x0 = 0;          // the mean of x
};

struct Curve {
  double b = 0;      // log(L - E) at x0
  double alpha = 0;
};

struct Joint {
  bool ok = false;
  double E = 0;
  std::vector<Curve> curves;
  double sse = std::numeric_limits<double>::infinity();
};

// log(E + exp(t)) and w = exp(t) / (E + exp(t)) (its derivative in t), without overflow.
double log_model(double E, double log_e, double t, double* w) {
  if (E <= 0) {
    *w = 1;
    return t;
  }
  const double d = t - log_e;
  if (d > 0) {
    const double q = std::exp(-d);
    *w = 1 / (1 + q);
    return t + std::log1p(q);
  }
  const double q = std::exp(d);
  *w = q / (1 + q);
  return log_e + std::log1p(q);
}

double arm_sse(const ArmData& a, double E, const Curve& c) {
  const double log_e = E > 0 ? std::log(E) : 0;
  double s = 0, w = 0;
  for (size_t i = 0; i < a.x.size(); ++i) {
    const double r = a.y[i] - log_model(E, log_e, c.b - c.alpha * (a.x[i] - a.x0), &w);
    s += r * r;
  }
  return s;
}

// The best (b, alpha) of one arm for a fixed E < every loss: a log-linear regression of
// log(L - E) on x to start, then Levenberg–Marquardt with alpha kept in [kAlphaMin, alpha_max].
Curve fit_arm(const ArmData& a, double E, double alpha_max, double* sse) {
  const size_t n = a.x.size();
  const double log_e = E > 0 ? std::log(E) : 0;
  double mz = 0, sxx = 0, sxz = 0;
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) {
    z[i] = E > 0 ? a.y[i] + std::log1p(-std::exp(log_e - a.y[i])) : a.y[i];
    mz += z[i];
  }
  mz /= static_cast<double>(n);
  for (size_t i = 0; i < n; ++i) {
    const double dx = a.x[i] - a.x0;
    sxx += dx * dx;
    sxz += dx * (z[i] - mz);
  }
  Curve c{mz, std::clamp(sxx > 0 ? -sxz / sxx : kAlphaMin, kAlphaMin, alpha_max)};
  double s = arm_sse(a, E, c);
  double lambda = 1e-3;
  for (int iter = 0; iter < 200 && std::isfinite(s); ++iter) {
    double h00 = 0, h01 = 0, h11 = 0, g0 = 0, g1 = 0, w = 0;
    for (size_t i = 0; i < n; ++i) {
      const double dx = a.x[i] - a.x0;
      const double r = a.y[i] - log_model(E, log_e, c.b - c.alpha * dx, &w);
      const double j0 = w, j1 = -dx * w;
      h00 += j0 * j0;
      h01 += j0 * j1;
      h11 += j1 * j1;
      g0 += j0 * r;
      g1 += j1 * r;
    }
    bool accepted = false;
    double s_new = s;
    while (lambda < 1e12) {
      const double a00 = h00 * (1 + lambda), a11 = h11 * (1 + lambda);
      const double det = a00 * a11 - h01 * h01;
      if (!(det > 0)) {
        lambda *= 10;
        continue;
      }
      const Curve trial{c.b + (a11 * g0 - h01 * g1) / det,
                        std::clamp(c.alpha + (a00 * g1 - h01 * g0) / det, kAlphaMin, alpha_max)};
      s_new = arm_sse(a, E, trial);
      if (s_new < s) {
        c = trial;
        lambda = std::max(lambda / 10, 1e-12);
        accepted = true;
        break;
      }
      lambda *= 10;
    }
    if (!accepted) break;
    const bool converged = s - s_new <= 1e-13 * s;
    s = s_new;
    if (converged) break;
  }
  *sse = s;
  return c;
}

Joint fit_at(const std::vector<ArmData>& arms, double E, double alpha_max) {
  Joint j;
  j.E = E;
  j.sse = 0;
  for (const ArmData& a : arms) {
    double s = 0;
    j.curves.push_back(fit_arm(a, E, alpha_max, &s));
    j.sse += s;
  }
  j.ok = std::isfinite(j.sse);
  return j;
}

// E profiled out: the sum of the arms' best residuals on a grid over [0, min loss), then a
// golden-section search in the best grid cell's neighbourhood.
Joint fit_all(const std::vector<ArmData>& arms, double alpha_max) {
  double min_loss = std::numeric_limits<double>::infinity();
  for (const ArmData& a : arms)
    for (double y : a.y) min_loss = std::min(min_loss, std::exp(y));
  const double e_max = min_loss * (1 - 1e-9);
  Joint best;
  int best_k = 0;
  for (int k = 0; k < kGrid; ++k) {
    Joint j = fit_at(arms, min_loss * k / kGrid, alpha_max);
    if (j.ok && j.sse < best.sse) {
      best = std::move(j);
      best_k = k;
    }
  }
  if (!best.ok) return best;
  double lo = min_loss * std::max(best_k - 1, 0) / kGrid, hi = std::min(min_loss * (best_k + 1) / kGrid, e_max);
  const double ratio = (std::sqrt(5.0) - 1) / 2;
  double e1 = hi - ratio * (hi - lo), e2 = lo + ratio * (hi - lo);
  Joint j1 = fit_at(arms, e1, alpha_max), j2 = fit_at(arms, e2, alpha_max);
  while (hi - lo > 1e-12 * min_loss) {
    if (j1.sse <= j2.sse) {
      hi = e2;
      e2 = e1;
      j2 = std::move(j1);
      e1 = hi - ratio * (hi - lo);
      j1 = fit_at(arms, e1, alpha_max);
    } else {
      lo = e1;
      e1 = e2;
      j1 = std::move(j2);
      e2 = lo + ratio * (hi - lo);
      j2 = fit_at(arms, e2, alpha_max);
    }
  }
  for (Joint* j : {&j1, &j2})
    if (j->ok && j->sse < best.sse) best = std::move(*j);
  return best;
}

std::string fmt(double v, const char* spec = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// The points grouped for the fit: arms in report order, each with its cells by size.
struct Layout {
  std::vector<std::string> arms;                     // baseline first
  std::vector<std::map<int, std::vector<size_t>>> cells;  // per arm: size -> point indices
};

double mean_of(const std::vector<Point>& points, const std::vector<size_t>& idx, double Point::*field) {
  double s = 0;
  for (size_t i : idx) s += points[i].*field;
  return s / static_cast<double>(idx.size());
}

// log C_arm at which arm c reaches the loss the baseline's curve has at log compute x_base.
double log_compute_to_match(const ArmData& base, const Curve& cb, const ArmData& arm, const Curve& ca,
                            double x_base) {
  const double log_reducible = cb.b - cb.alpha * (x_base - base.x0);  // log(L_b(C) - E)
  return arm.x0 + (ca.b - log_reducible) / ca.alpha;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double h = p * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(h);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (h - static_cast<double>(i)) * (v[i + 1] - v[i]);
}

FitResult refuse(FitResult r, Refusal why, std::string reason) {
  r.ok = false;
  r.refusal = why;
  r.reason = std::move(reason);
  r.arms.clear();
  return r;
}

// Input checks that need no fit; the reason, or empty.
std::string check_points(const std::vector<Point>& points) {
  if (points.empty()) return "no points: the fit needs at least 3 sizes of the baseline and of each arm";
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    const std::string at = "points[" + std::to_string(i) + "]";
    if (p.arm.empty()) return at + ".arm is empty";
    if (p.size < 0) return at + ".size is " + std::to_string(p.size) + ": a size is an index into the ladder, >= 0";
    if (!(std::isfinite(p.compute) && p.compute > 0))
      return at + ".compute is " + fmt(p.compute) + " (arm " + p.arm + "): it must be a positive number of FLOPs";
    if (!(std::isfinite(p.loss) && p.loss > 0))
      return at + ".loss is " + fmt(p.loss) + " (arm " + p.arm + "): it must be a positive finite loss";
  }
  return "";
}

Layout layout_of(const std::vector<Point>& points, const std::string& baseline) {
  Layout l;
  l.arms.push_back(baseline);
  for (const Point& p : points)
    if (std::find(l.arms.begin(), l.arms.end(), p.arm) == l.arms.end()) l.arms.push_back(p.arm);
  l.cells.resize(l.arms.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const size_t a = static_cast<size_t>(std::find(l.arms.begin(), l.arms.end(), points[i].arm) - l.arms.begin());
    l.cells[a][points[i].size].push_back(i);
  }
  return l;
}

// Curves that the model cannot carry: too few sizes, or a mean loss that does not fall.
std::string check_curves(const std::vector<Point>& points, const Layout& l) {
  std::vector<std::string> few, rising;
  for (size_t a = 0; a < l.arms.size(); ++a) {
    if (l.cells[a].size() < 3) {
      std::vector<std::string> sizes;
      for (const auto& [s, idx] : l.cells[a]) sizes.push_back(std::to_string(s));
      few.push_back(l.arms[a] + " (size" + (sizes.size() == 1 ? " " : "s ") + join(sizes, ", ") + ")");
      continue;
    }
    std::vector<std::pair<double, int>> by_compute;  // (mean compute, size)
    for (const auto& [s, idx] : l.cells[a]) by_compute.emplace_back(mean_of(points, idx, &Point::compute), s);
    std::sort(by_compute.begin(), by_compute.end());
    for (size_t k = 1; k < by_compute.size(); ++k) {
      const int s0 = by_compute[k - 1].second, s1 = by_compute[k].second;
      const double l0 = mean_of(points, l.cells[a].at(s0), &Point::loss);
      const double l1 = mean_of(points, l.cells[a].at(s1), &Point::loss);
      if (!(l1 < l0))
        rising.push_back(l.arms[a] + ": size " + std::to_string(s0) + " (" + fmt(l0) + " at " +
                         fmt(by_compute[k - 1].first, "%.3g") + " FLOPs) to size " + std::to_string(s1) + " (" +
                         fmt(l1) + " at " + fmt(by_compute[k].first, "%.3g") + " FLOPs)");
    }
  }
  if (!few.empty())
    return "fewer than 3 model sizes (the curve has 2 parameters per arm besides the shared E): " + join(few, "; ");
  if (!rising.empty())
    return "the mean loss does not fall as compute grows, so no curve L = E + A*C^-alpha fits: " + join(rising, "; ");
  return "";
}

// The arms' data from the points of `pick` (per arm, per cell in ascending size: the indices).
std::vector<ArmData> arm_data(const std::vector<Point>& points, const std::vector<std::vector<size_t>>& pick) {
  std::vector<ArmData> arms(pick.size());
  for (size_t a = 0; a < pick.size(); ++a) {
    for (size_t i : pick[a]) {
      arms[a].x.push_back(std::log(points[i].compute));
      arms[a].y.push_back(std::log(points[i].loss));
      arms[a].x0 += arms[a].x.back();
    }
    arms[a].x0 /= static_cast<double>(arms[a].x.size());
  }
  return arms;
}

// log multipliers of every arm against arm 0 at log compute x_base (NaN where undefined).
std::vector<double> log_multipliers(const std::vector<ArmData>& arms, const Joint& j, double x_base) {
  std::vector<double> out;
  for (size_t a = 0; a < arms.size(); ++a)
    out.push_back(x_base - log_compute_to_match(arms[0], j.curves[0], arms[a], j.curves[a], x_base));
  return out;
}

// The interval: each cell's replicates drawn with replacement, the whole fit redone, the 2.5
// and 97.5 percentiles of each arm's multiplier taken. The drawn log losses' deviations from
// their cell's mean are widened by sqrt(n / (n - 1)): drawing n of n points gives the mean a
// variance (n - 1) / n of the true one, 2/3 with three seeds, and the plain percentile interval
// held the true multiplier of synthetic curves in only 50 of 60 draws (93 of 100 widened).
void bootstrap(const std::vector<Point>& points, const Layout& l, const FitOptions& options, FitResult& r) {
  std::vector<std::vector<double>> boot(l.arms.size());
  std::mt19937_64 rng(options.seed);
  const int top_size = l.cells[0].rbegin()->first;
  for (int k = 0; k < options.resamples; ++k) {
    std::vector<ArmData> resampled(l.arms.size());
    double top_compute = 0;  // the resampled baseline's mean compute at its largest size
    for (size_t a = 0; a < l.arms.size(); ++a) {
      for (const auto& [s, idx] : l.cells[a]) {
        const size_t n = idx.size();
        double mean = 0;
        for (size_t i : idx) mean += std::log(points[i].loss) / static_cast<double>(n);
        const double widen = n > 1 ? std::sqrt(static_cast<double>(n) / static_cast<double>(n - 1)) : 1.0;
        for (size_t d = 0; d < n; ++d) {
          const Point& p = points[idx[rng() % n]];
          resampled[a].x.push_back(std::log(p.compute));
          resampled[a].y.push_back(mean + widen * (std::log(p.loss) - mean));
          resampled[a].x0 += resampled[a].x.back();
          if (a == 0 && s == top_size) top_compute += p.compute / static_cast<double>(n);
        }
      }
      resampled[a].x0 /= static_cast<double>(resampled[a].x.size());
    }
    const Joint jb = fit_all(resampled, options.alpha_max);
    std::vector<double> m;
    if (jb.ok) m = log_multipliers(resampled, jb, std::log(top_compute));
    ++r.resamples;
    if (m.empty() || std::any_of(m.begin(), m.end(), [](double v) { return !std::isfinite(v); })) {
      ++r.failed_resamples;
      continue;
    }
    for (size_t a = 0; a < m.size(); ++a) boot[a].push_back(std::exp(m[a]));
  }
  for (size_t a = 0; a < r.arms.size(); ++a) {
    const bool enough = boot[a].size() >= 2;
    r.arms[a].lo = enough ? percentile(boot[a], 0.025) : std::numeric_limits<double>::quiet_NaN();
    r.arms[a].hi = enough ? percentile(boot[a], 0.975) : std::numeric_limits<double>::quiet_NaN();
  }
  if (r.failed_resamples > options.poor_failures * r.resamples)
    r.warnings.push_back(std::to_string(r.failed_resamples) + " of " + std::to_string(r.resamples) +
                         " bootstrap refits failed: the interval is doubtful");
  bool single = false;
  for (const auto& arm_cells : l.cells)
    for (const auto& [s, idx] : arm_cells) single = single || idx.size() == 1;
  if (single)
    r.warnings.push_back("some (arm, size) cells have a single point: the interval leaves out their noise (run more seeds)");
}

}  // namespace

FitResult fit_compute_multiplier(const std::vector<Point>& points, const std::string& baseline,
                                 const FitOptions& options) {
  FitResult r;
  r.baseline = baseline;
  if (std::string why = check_points(points); !why.empty()) return refuse(r, Refusal::bad_input, why);
  const Layout l = layout_of(points, baseline);
  if (l.cells[0].empty()) {
    std::vector<std::string> present(l.arms.begin() + 1, l.arms.end());
    return refuse(r, Refusal::bad_input,
                  "the baseline \"" + baseline + "\" has no points (arms present: " + join(present, ", ") + ")");
  }
  if (std::string why = check_curves(points, l); !why.empty()) return refuse(r, Refusal::unfittable, why);

  std::vector<std::vector<size_t>> all(l.arms.size());
  for (size_t a = 0; a < l.arms.size(); ++a)
    for (const auto& [s, idx] : l.cells[a]) all[a].insert(all[a].end(), idx.begin(), idx.end());
  const std::vector<ArmData> arms = arm_data(points, all);
  const Joint j = fit_all(arms, options.alpha_max);
  if (!j.ok) return refuse(r, Refusal::unfittable, "the least-squares fit did not converge to finite residuals");
  r.E = j.E;

  for (const auto& [s, idx] : l.cells[0]) {
    r.sizes.push_back(s);
    r.size_compute.push_back(mean_of(points, idx, &Point::compute));
  }
  r.target_compute = r.size_compute.back();
  const double x_target = std::log(r.target_compute);
  r.target_loss = j.E + std::exp(j.curves[0].b - j.curves[0].alpha * (x_target - arms[0].x0));
  const std::vector<double> log_m = log_multipliers(arms, j, x_target);
  std::vector<std::vector<double>> log_m_by_size;  // [size][arm]
  for (double c : r.size_compute) log_m_by_size.push_back(log_multipliers(arms, j, std::log(c)));
  double total_sq = 0;
  for (size_t a = 0; a < l.arms.size(); ++a) {
    ArmFit f;
    f.arm = l.arms[a];
    f.alpha = j.curves[a].alpha;
    f.log_A = j.curves[a].b + f.alpha * arms[a].x0;
    f.A = std::exp(f.log_A);
    f.multiplier = f.lo = f.hi = std::exp(log_m[a]);
    f.compute_at_target = std::exp(x_target - log_m[a]);
    if (!std::isfinite(f.alpha) || !std::isfinite(f.multiplier) || !(f.multiplier > 0) || !std::isfinite(r.target_loss))
      return refuse(r, Refusal::unfittable,
                    "the fit of " + f.arm + " gives no finite multiplier (alpha " + fmt(f.alpha) + ", E " + fmt(j.E) +
                        ", L* " + fmt(r.target_loss) + ")");
    for (const std::vector<double>& m : log_m_by_size) f.multiplier_by_size.push_back(std::exp(m[a]));
    double sq = 0;
    for (size_t i : all[a]) {
      const Point& p = points[i];
      const double fitted = j.E + std::exp(f.log_A - f.alpha * std::log(p.compute));
      const double res = std::log(p.loss) - std::log(fitted);
      f.residuals.push_back({p.size, p.seed, p.group, p.compute, p.loss, fitted, res});
      sq += res * res;
    }
    total_sq += sq;
    f.rms_residual = std::sqrt(sq / static_cast<double>(all[a].size()));
    if (f.rms_residual > options.poor_rms)
      r.warnings.push_back("poor fit for " + f.arm + ": RMS log residual " + fmt(f.rms_residual, "%.3f") + " above " +
                           fmt(options.poor_rms, "%.3f") + " (the curve misses its points by more than " +
                           fmt(100 * options.poor_rms, "%.0f") + " % of the loss; see the residuals per size)");
    if (f.alpha <= kAlphaMin * 1.0001 || f.alpha >= options.alpha_max * 0.9999)
      r.warnings.push_back("alpha of " + f.arm + " sits at its bound (" + fmt(f.alpha) + "): the curve is not determined");
    const auto [lo_c, hi_c] = std::minmax_element(arms[a].x.begin(), arms[a].x.end());
    const double x_match = x_target - log_m[a];
    if (x_match > *hi_c + std::log(2.0) || x_match < *lo_c - std::log(2.0))
      r.warnings.push_back(f.arm + " reaches L* = " + fmt(r.target_loss) + " at " + fmt(f.compute_at_target, "%.3g") +
                           " FLOPs, more than 2x outside its measured compute (" + fmt(std::exp(*lo_c), "%.3g") +
                           " to " + fmt(std::exp(*hi_c), "%.3g") + "): its multiplier is an extrapolation");
    r.arms.push_back(std::move(f));
  }
  r.rms_residual = std::sqrt(total_sq / static_cast<double>(points.size()));
  if (l.arms.size() == 1) r.warnings.push_back("only the baseline has points: there is nothing to compare");
  if (options.resamples > 0) bootstrap(points, l, options, r);
  r.ok = true;
  return r;
}

}  // namespace precon::study
