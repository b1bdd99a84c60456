// The compute-multiplier fit on losses drawn from known curves: L = E + A*C^-alpha with E = 1.8,
// a baseline with alpha = 0.3, four sizes over two decades of compute, three seeds each, 0.5 %
// log-normal noise from a fixed seed. The fit finds the known multiplier inside its interval;
// noise-free curves give the parameters back; data the model cannot carry is refused with the
// reason.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <random>

#include "orchestrator/study/fit.h"

namespace precon::study {
namespace {

constexpr double kE = 1.8;
constexpr double kA = 4.27e5;    // the baseline's loss: 3.50 at 1e18 FLOPs, 2.23 at 1e20
constexpr double kAlpha = 0.3;

double baseline_loss(double compute) { return kE + kA * std::pow(compute, -kAlpha); }

// Normal draws from a portable generator (std::normal_distribution differs between libraries).
class Noise {
 public:
  explicit Noise(uint64_t seed) : rng_(seed) {}
  double normal() {
    const double u1 = (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 rng_;
};

// Sizes 0..3 at 1e18 .. 1e20 FLOPs (a factor 10^(2/3) apart), `seeds` replicates of each arm.
std::vector<Point> draw(const std::vector<std::pair<std::string, std::function<double(double)>>>& arms, double sigma,
                        uint64_t seed, int seeds = 3, double first_compute = 1e18) {
  Noise noise(seed);
  std::vector<Point> points;
  for (int size = 0; size < 4; ++size) {
    const double compute = first_compute * std::pow(10.0, 2.0 * size / 3);
    for (int s = 0; s < seeds; ++s)
      for (const auto& [arm, loss] : arms) points.push_back({arm, size, s, compute, loss(compute) * std::exp(sigma * noise.normal()), ""});
  }
  return points;
}

const ArmFit& arm_of(const FitResult& r, const std::string& arm) {
  for (const ArmFit& a : r.arms)
    if (a.arm == arm) return a;
  throw std::out_of_range("no arm " + arm);
}

TEST(StudyFit, FindsTwiceTheComputeEfficiencyInsideATightInterval) {
  // L_muon(C) = L_adamw(2C): muon reaches any loss with half the compute, at every size.
  const FitResult r = fit_compute_multiplier(
      draw({{"adamw", baseline_loss}, {"muon", [](double c) { return baseline_loss(2 * c); }}}, 0.005, 1), "adamw");
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  const ArmFit& base = arm_of(r, "adamw");
  EXPECT_EQ(r.arms.front().arm, "adamw");
  EXPECT_EQ(base.multiplier, 1);
  EXPECT_EQ(base.lo, 1);
  EXPECT_EQ(base.hi, 1);
  const ArmFit& muon = arm_of(r, "muon");
  std::printf("k = 2: multiplier %.3f [%.3f, %.3f], E %.3f, alpha %.3f / %.3f, RMS %.4f\n", muon.multiplier, muon.lo,
              muon.hi, r.E, base.alpha, muon.alpha, r.rms_residual);
  EXPECT_LE(muon.lo, 2);
  EXPECT_GE(muon.hi, 2);
  EXPECT_LT(muon.lo, muon.multiplier);
  EXPECT_GT(muon.hi, muon.multiplier);
  EXPECT_LT(muon.hi - muon.lo, 1);
  ASSERT_EQ(muon.multiplier_by_size.size(), 4u);
  for (double m : muon.multiplier_by_size) EXPECT_NEAR(m, 2, 0.3);
  EXPECT_EQ(muon.multiplier_by_size.back(), muon.multiplier);
  EXPECT_NEAR(muon.compute_at_target, r.target_compute / muon.multiplier, 1e-9 * r.target_compute);
  EXPECT_DOUBLE_EQ(r.target_compute, 1e20);
  EXPECT_NEAR(r.E, kE, 0.15);
  // The residuals are the noise: 0.5 % in log loss.
  EXPECT_GT(r.rms_residual, 0.002);
  EXPECT_LT(r.rms_residual, 0.01);
  EXPECT_EQ(muon.residuals.size(), 12u);
  EXPECT_EQ(r.resamples, 1000);
  EXPECT_EQ(r.failed_resamples, 0);
}

TEST(StudyFit, FindsAMultiplierThatDependsOnTheTargetLoss) {
  // The arm's curve is steeper (alpha 0.34): it matches the baseline at 1.3x the compute at 1e19
  // FLOPs and gains more the larger the model. The true multiplier at L* = L_adamw(1e20) is
  // C* / C_arm(L*) with C_arm(L) = (A_arm / (L - E))^(1/alpha_arm).
  const double alpha = 0.34;
  const double a = (baseline_loss(1.3e19) - kE) * std::pow(1e19, alpha);
  const auto truth_at = [&](double compute) {
    return compute / std::pow(a / (baseline_loss(compute) - kE), 1 / alpha);
  };
  const FitResult r = fit_compute_multiplier(
      draw({{"adamw", baseline_loss}, {"shampoo", [&](double c) { return kE + a * std::pow(c, -alpha); }}}, 0.005, 3),
      "adamw");
  ASSERT_TRUE(r.ok) << r.reason;
  const ArmFit& arm = arm_of(r, "shampoo");
  const double truth = truth_at(1e20);
  std::printf("k = 1.3 at 1e19, alpha 0.34: true multiplier %.3f, fitted %.3f [%.3f, %.3f], alpha %.3f\n", truth,
              arm.multiplier, arm.lo, arm.hi, arm.alpha);
  EXPECT_NEAR(truth, 1.653, 0.001);
  EXPECT_LE(arm.lo, truth);
  EXPECT_GE(arm.hi, truth);
  EXPECT_LT(arm.hi - arm.lo, 1);
  // The trend: the multiplier grows with the size, as the true one does (1.16 at 1e18 FLOPs).
  ASSERT_EQ(arm.multiplier_by_size.size(), 4u);
  for (size_t s = 0; s < 4; ++s) EXPECT_NEAR(arm.multiplier_by_size[s], truth_at(r.size_compute[s]), 0.12) << s;
  EXPECT_LT(arm.multiplier_by_size.front(), arm.multiplier_by_size.back());
}

TEST(StudyFit, NoiseFreeCurvesGiveTheirParametersBack) {
  // Up to 1e22 FLOPs, three arms with their own A and alpha: the fit is exact, in log units.
  struct Truth {
    std::string arm;
    double A, alpha;
  };
  const std::vector<Truth> truths = {{"adamw", 2.0e6, 0.3}, {"muon", 9.0e6, 0.34}, {"soap", 6.0e5, 0.27}};
  std::vector<std::pair<std::string, std::function<double(double)>>> arms;
  for (const Truth& t : truths) arms.emplace_back(t.arm, [t](double c) { return kE + t.A * std::pow(c, -t.alpha); });
  FitOptions no_interval;
  no_interval.resamples = 0;
  const FitResult r = fit_compute_multiplier(draw(arms, 0, 1, 2, 1e20), "adamw", no_interval);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_NEAR(r.E, kE, 1e-6 * kE);
  for (const Truth& t : truths) {
    const ArmFit& f = arm_of(r, t.arm);
    EXPECT_NEAR(f.alpha, t.alpha, 1e-6 * t.alpha) << t.arm;
    EXPECT_NEAR(f.A, t.A, 1e-6 * t.A) << t.arm;
    EXPECT_LT(f.rms_residual, 1e-9) << t.arm;
    const double l_star = kE + truths[0].A * std::pow(1e22, -truths[0].alpha);
    const double multiplier = 1e22 / std::pow(t.A / (l_star - kE), 1 / t.alpha);
    EXPECT_NEAR(f.multiplier, multiplier, 1e-6 * multiplier) << t.arm;
    EXPECT_EQ(f.lo, f.multiplier);
  }
  EXPECT_EQ(r.resamples, 0);
}

TEST(StudyFit, TheSameInputGivesTheSameInterval) {
  FitOptions few;
  few.resamples = 50;
  const std::vector<Point> points =
      draw({{"adamw", baseline_loss}, {"muon", [](double c) { return baseline_loss(2 * c); }}}, 0.005, 11);
  const FitResult a = fit_compute_multiplier(points, "adamw", few), b = fit_compute_multiplier(points, "adamw", few);
  ASSERT_TRUE(a.ok) << a.reason;
  EXPECT_EQ(a.arms[1].lo, b.arms[1].lo);
  EXPECT_EQ(a.arms[1].hi, b.arms[1].hi);
  few.seed += 1;
  EXPECT_NE(fit_compute_multiplier(points, "adamw", few).arms[1].lo, a.arms[1].lo);
}

TEST(StudyFit, WarnsOfAPoorFitAndOfSingleReplicates) {
  // Muon's losses bent by 6 % (down at the ends, up in the middle): no power law follows them.
  // One seed per size.
  std::vector<Point> points = draw({{"adamw", baseline_loss}, {"muon", [](double c) { return baseline_loss(2 * c); }}}, 0, 1, 1);
  for (Point& p : points)
    if (p.arm == "muon") p.loss *= std::exp(p.size % 3 == 0 ? -0.06 : 0.06);
  FitOptions few;
  few.resamples = 20;
  const FitResult r = fit_compute_multiplier(points, "adamw", few);
  ASSERT_TRUE(r.ok) << r.reason;
  // The shared E carries part of muon's misfit into adamw's curve: both are called poor.
  ASSERT_EQ(r.warnings.size(), 3u);
  EXPECT_EQ(r.warnings[0].rfind("poor fit for adamw: RMS log residual 0.023 above 0.020", 0), 0u) << r.warnings[0];
  EXPECT_EQ(r.warnings[1].rfind("poor fit for muon: RMS log residual 0.039 above 0.020", 0), 0u) << r.warnings[1];
  EXPECT_NE(r.warnings[2].find("single point"), std::string::npos) << r.warnings[2];
  EXPECT_GT(arm_of(r, "muon").rms_residual, 0.02);
}

TEST(StudyFit, RefusesFewerThanThreeSizes) {
  std::vector<Point> points = draw({{"adamw", baseline_loss}, {"muon", baseline_loss}}, 0.005, 1);
  std::erase_if(points, [](const Point& p) { return p.arm == "muon" && p.size >= 2; });
  const FitResult r = fit_compute_multiplier(points, "adamw");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.refusal, Refusal::unfittable);
  EXPECT_TRUE(r.arms.empty());
  EXPECT_EQ(r.reason, "fewer than 3 model sizes (the curve has 2 parameters per arm besides the shared E): muon (sizes 0, 1)");
}

TEST(StudyFit, RefusesACurveThatRises) {
  std::vector<Point> points = draw({{"adamw", baseline_loss}, {"muon", baseline_loss}}, 0, 1);
  for (Point& p : points)
    if (p.arm == "muon" && p.size == 2) p.loss = 3.0;  // above size 1's 2.87
  const FitResult r = fit_compute_multiplier(points, "adamw");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.refusal, Refusal::unfittable);
  EXPECT_NE(r.reason.find("the mean loss does not fall as compute grows"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("muon: size 1 (2.873 at 4.64e+18 FLOPs) to size 2 (3 at 2.15e+19 FLOPs)"), std::string::npos)
      << r.reason;
  EXPECT_EQ(r.reason.find("adamw"), std::string::npos) << r.reason;
}

TEST(StudyFit, RefusesAMissingBaselineAndValuesThatAreNotPoints) {
  const std::vector<Point> good = draw({{"adamw", baseline_loss}, {"muon", baseline_loss}}, 0.005, 1);
  FitResult r = fit_compute_multiplier(good, "sgd");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.refusal, Refusal::bad_input);
  EXPECT_EQ(r.reason, "the baseline \"sgd\" has no points (arms present: adamw, muon)");

  r = fit_compute_multiplier({}, "adamw");
  EXPECT_EQ(r.refusal, Refusal::bad_input);
  EXPECT_NE(r.reason.find("no points"), std::string::npos) << r.reason;

  const std::vector<std::pair<std::function<void(Point&)>, std::string>> bad = {
      {[](Point& p) { p.compute = 0; }, "points[3].compute is 0 (arm muon): it must be a positive number of FLOPs"},
      {[](Point& p) { p.compute = -1e18; }, "points[3].compute is -1e+18 (arm muon)"},
      {[](Point& p) { p.loss = 0; }, "points[3].loss is 0 (arm muon): it must be a positive finite loss"},
      {[](Point& p) { p.loss = std::nan(""); }, "points[3].loss is nan (arm muon)"},
      {[](Point& p) { p.loss = INFINITY; }, "points[3].loss is inf (arm muon)"},
      {[](Point& p) { p.size = -1; }, "points[3].size is -1"},
      {[](Point& p) { p.arm.clear(); }, "points[3].arm is empty"},
  };
  for (const auto& [spoil, reason] : bad) {
    std::vector<Point> points = good;
    spoil(points[3]);
    r = fit_compute_multiplier(points, "adamw");
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.refusal, Refusal::bad_input);
    EXPECT_EQ(r.reason.rfind(reason, 0), 0u) << r.reason;
  }
}

TEST(StudyFit, JsonHasTheDocumentedKeysAndNoNumbersWhenRefused) {
  FitOptions few;
  few.resamples = 20;
  const FitResult r = fit_compute_multiplier(
      draw({{"adamw", baseline_loss}, {"muon", [](double c) { return baseline_loss(2 * c); }}}, 0.005, 7), "adamw", few);
  const nlohmann::json j = fit_to_json(r);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["baseline"], "adamw");
  EXPECT_EQ(j["reason"], "");
  EXPECT_EQ(j["warnings"], nlohmann::json::array());
  ASSERT_EQ(j["arms"].size(), 2u);
  for (const auto& a : j["arms"]) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"A", "E", "alpha", "arm", "interval", "multiplier", "multiplier_by_size",
                                              "rms_residual"}));
    EXPECT_EQ(a["interval"].size(), 2u);
    EXPECT_EQ(a["multiplier_by_size"].size(), 4u);
  }
  EXPECT_EQ(j["arms"][1]["multiplier"].get<double>(), r.arms[1].multiplier);
  const std::string table = format_fit_table(r);
  EXPECT_NE(table.find("muon"), std::string::npos) << table;
  EXPECT_NE(table.find("mean residual"), std::string::npos) << table;

  const nlohmann::json refused = fit_to_json(fit_compute_multiplier({}, "adamw"));
  EXPECT_EQ(refused["ok"], false);
  EXPECT_EQ(refused["arms"], nlohmann::json::array());
  EXPECT_NE(refused["reason"].get<std::string>().find("no points"), std::string::npos);
}

}  // namespace
}  // namespace precon::study
