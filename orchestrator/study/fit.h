// The compute multiplier of an optimizer setting against a baseline: how much less (or more)
// compute an arm needs to reach the loss the baseline reaches at its largest model size, from
// one loss-vs-compute curve per arm fitted over a ladder of model sizes.
//
// Model: L(C) = E + A_arm * C^(-alpha_arm), fitted by least squares on log L. E (the irreducible
// loss) is shared by all arms: it belongs to the data and the model family, not to the optimizer,
// and with three sizes per arm a per-arm E would leave no residual degrees of freedom. The
// interval is a percentile bootstrap over the replicate points of each (arm, size) cell (their
// spread widened by sqrt(n / (n - 1)), which resampling n of n points loses).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace precon::study {

// One finished run: its final loss at the compute it spent.
struct Point {
  std::string arm;    // the optimizer setting, e.g. "muon"
  int size = 0;       // index into the model size ladder (0 = smallest)
  int seed = 0;       // replicate id (informational; every point of a cell is a replicate)
  double compute = 0; // FLOPs spent, > 0
  double loss = 0;    // final loss, > 0
  std::string group;  // further replicate label, e.g. a neighbouring learning rate (informational)
};

struct FitOptions {
  int resamples = 1000;            // bootstrap resamples for the interval; 0: no interval
  uint64_t seed = 0x5eed'f17;      // the bootstrap's RNG seed: the same input gives the same interval
  double poor_rms = 0.02;          // RMS log residual above which an arm's fit is called poor
  double poor_failures = 0.05;     // share of failed bootstrap refits above which the interval is doubtful
  double alpha_max = 5.0;          // upper bound on alpha (lower bound: just above 0)
};

// Why there is no result. bad_input: values that cannot be points (empty, non-positive, the
// baseline absent); unfittable: valid points whose curves cannot carry the model.
enum class Refusal { none, bad_input, unfittable };

// One point's residual after the fit.
struct Residual {
  int size = 0;
  int seed = 0;
  std::string group;
  double compute = 0;
  double loss = 0;
  double fitted = 0;     // E + A * compute^-alpha
  double log_residual = 0;  // log(loss) - log(fitted)
};

struct ArmFit {
  std::string arm;
  double alpha = 0;
  double A = 0;             // may be large: A = exp(log_A)
  double log_A = 0;
  double multiplier = 1;    // C_base,max / C_arm(L*); > 1: the arm needs less compute
  double lo = 1, hi = 1;    // 95 % percentile bootstrap interval of the multiplier (= multiplier without resamples)
  std::vector<double> multiplier_by_size;  // at each of FitResult::sizes (the baseline's sizes)
  double compute_at_target = 0;            // C_arm(L*), FLOPs
  double rms_residual = 0;                 // over the arm's points, log units
  std::vector<Residual> residuals;         // by size, then in input order
};

struct FitResult {
  bool ok = false;
  Refusal refusal = Refusal::none;
  std::string reason;                 // why not ok; empty when ok
  std::vector<std::string> warnings;  // poor fit, doubtful interval, extrapolation
  std::string baseline;
  double E = 0;                       // the shared irreducible loss
  double target_loss = 0;             // L*: the baseline's fitted loss at its largest size
  double target_compute = 0;          // C_base,max: mean compute of the baseline's largest-size cell
  std::vector<int> sizes;             // the baseline's sizes, ascending (multiplier_by_size's order)
  std::vector<double> size_compute;   // the baseline's mean compute at each of them
  std::vector<ArmFit> arms;           // baseline first (multiplier 1), then in order of appearance
  double rms_residual = 0;            // over all points
  int resamples = 0;                  // bootstrap resamples drawn
  int failed_resamples = 0;           // of which the refit failed
};

// Fits the curves and the multipliers of every arm against `baseline`. Never throws on bad data:
// a refusal comes back as ok = false with the reason (naming the point as points[i], the arm
// and the sizes concerned).
FitResult fit_compute_multiplier(const std::vector<Point>& points, const std::string& baseline,
                                 const FitOptions& options = {});

// {"arms": [{"arm", "multiplier", "interval": [lo, hi], "alpha", "E", "A", "multiplier_by_size",
//  "rms_residual"}], "ok", "reason", "warnings", "baseline"}; arms is empty when not ok.
nlohmann::json fit_to_json(const FitResult& result);

// The table for a terminal: per arm the multiplier, its interval, alpha, E, A, RMS residual and
// the per-size multipliers; then the mean residual of each cell; then the warnings.
std::string format_fit_table(const FitResult& result);

}  // namespace precon::study
