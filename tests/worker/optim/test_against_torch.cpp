// AdamW, Muon, Shampoo and SOAP against the torch implementations of tests/worker/optim/optim_reference.py:
// same initial parameters, same 12 gradients, same lr scales; every parameter compared at the end.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>

#include "tests/common/npy.h"
#include "tests/worker/support/optim_util.h"

namespace precon::worker {
namespace {

using testing::config_from_json;

class OptimReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((std::filesystem::temp_directory_path() /
                            ("precon_optim_ref_" + std::to_string(::getpid())))
                               .string());
    const std::string cmd = std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR +
                            "/tests/worker/optim/optim_reference.py --out " + *dir_;
    status_ = std::system(cmd.c_str());
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::vector<float> load(const std::string& file) {
    test::NpyArray a = test::read_npy(*dir_ + "/" + file);
    return {a.values.begin(), a.values.end()};
  }
  static nlohmann::json cases() {
    std::ifstream in(*dir_ + "/cases.json");
    return nlohmann::json::parse(in);
  }

  // Runs one case of cases.json through our optimizer and returns max |ours - torch| per parameter.
  void check_case(const std::string& name, double tolerance) {
    ASSERT_EQ(status_, 0) << "optim_reference.py failed (needs " << PRECON_PYTHON << " with torch)";
    nlohmann::json all = cases();
    const nlohmann::json* c = nullptr;
    for (const auto& k : all["cases"]) {
      if (k["name"] == name) c = &k;
    }
    ASSERT_NE(c, nullptr) << "no case " << name << " in cases.json";
    ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
    for (size_t i = 0; i < store.size(); ++i) testing::set_visible(store, i, load("init." + store.spec(i).name + ".npy"));
    auto opt = make_optimizer(config_from_json((*c)["config"]), testing::optim_params(store), kernels::Device::cpu);
    const int steps = all["steps"];
    for (int t = 1; t <= steps; ++t) {
      for (size_t i = 0; i < store.size(); ++i) {
        testing::set_visible(store, i, load("grad." + std::to_string(t) + "." + store.spec(i).name + ".npy"), true);
      }
      StepContext ctx;
      ctx.step = t;
      ctx.lr_scale = (*c)["lr_scales"][t - 1];
      ctx.grad_scale = (*c)["grad_scale"];
      opt->step(ctx);
    }
    double worst = 0;
    for (size_t i = 0; i < store.size(); ++i) {
      const std::string& p = store.spec(i).name;
      std::vector<float> ours = testing::host_visible(store, i);
      std::vector<float> ref = load("final." + name + "." + p + ".npy");
      std::vector<float> init = load("init." + p + ".npy");
      const double diff = test::max_abs_diff(ours, ref);
      worst = std::max(worst, diff);
      EXPECT_LT(diff, tolerance) << name << ": " << p << " differs from torch by " << diff;
      // The reference moved every parameter; a no-op optimizer must not pass by tolerance.
      EXPECT_GT(test::max_abs_diff(ref, init), 20 * tolerance) << p << " barely moved in the reference";
    }
    std::printf("[ %s ] max |ours - torch| = %.3g (tolerance %.1g)\n", name.c_str(), worst, tolerance);
  }

  static std::string* dir_;
  static int status_;
};

std::string* OptimReference::dir_ = nullptr;
int OptimReference::status_ = -1;

// Tolerances: parameters are O(0.02–0.3) and move by O(lr) per step. AdamW is the same fp32
// arithmetic in another order (observed 1.5e-8). Newton–Schulz in two fp32 implementations
// differs by ~1e-6 relative, times lr ≤ 0.02 (observed ≤ 4.5e-8). Shampoo's inverse roots are
// fp32 eigh (or Newton, tolerance 1e-6) here and fp64 eigh in the reference, with ε = 1e-6
// amplifying the round-off of rank-deficient early statistics by ε^(-1/4) ≈ 32 (observed 2e-6 to
// 4e-6; 3e-8 to 2e-7 where the roots are well conditioned). Each bound is ~10× the observed error.

TEST_F(OptimReference, AdamWMatchesTorch) { check_case("adamw_wd_schedule_clip", 2e-7); }

// Cautious weight decay (the decay only where the update and the parameter agree in sign), against
// the reference written from that rule; decoupled decay instead moves these parameters by 1e-4 or more.
TEST_F(OptimReference, AdamWCautiousWeightDecay) { check_case("adamw_cautious", 2e-7); }

TEST_F(OptimReference, MuonCautiousWeightDecay) { check_case("muon_cautious", 5e-7); }

TEST_F(OptimReference, ShampooCautiousWeightDecay) { check_case("shampoo_cautious", 1e-6); }

TEST_F(OptimReference, MuonEmaNesterovKellerShapeSplitQkv) { check_case("muon_ema_nesterov_keller_shape_qkv", 5e-7); }

// Muon split (optimizer.muon.split_heads): each head's block of c_attn (columns of each Q/K/V block
// of the (in, out) storage) and of c_proj (its input rows) orthogonalised and scaled on its own; the
// whole-matrix step moves these two matrices by 1.7e-3 to 4e-2 from the reference's.
TEST_F(OptimReference, MuonSplitHeadsShape) { check_case("muon_split_heads_shape", 5e-7); }

TEST_F(OptimReference, MuonSplitHeadsRmsMatchPolarExpress) { check_case("muon_split_heads_rms_match", 5e-7); }

TEST_F(OptimReference, MuonSgdPolarExpressRmsMatch) { check_case("muon_sgd_polar_rms_match", 5e-7); }

TEST_F(OptimReference, MuonExplicitCoefficientsSpectral) { check_case("muon_explicit_spectral", 5e-7); }

TEST_F(OptimReference, ShampooAdamGraftingRunningSumFrequency1) { check_case("shampoo_adam_sum_freq1", 3e-5); }

TEST_F(OptimReference, ShampooSgdGraftingFrequency3Blocks) { check_case("shampoo_sgd_freq3_blocks_wd", 1e-6); }

TEST_F(OptimReference, ShampooNoGraftingAllMatrices) { check_case("shampoo_none_all_matrices_freq2", 5e-5); }

TEST_F(OptimReference, ShampooAdagradExponentNoBiasCorrection) {
  check_case("shampoo_adagrad_exponent_no_bias_correction", 2e-6);
}

// SOAP: the reference keeps its eigenbases in float64 and rotates the first moment back and forth
// every step (soap.py's order); ours in fp32, rotating it at refreshes only. Each case is first
// shown to be well conditioned: the reference's own float32 run lands within a tenth of the
// tolerance of its float64 run (observed 1.1e-7 to 1.5e-7), so no eigenspace is degenerate enough
// for two correct implementations to part.
void expect_well_conditioned(const std::string& name, double tolerance, const std::function<std::vector<float>(const std::string&)>& load) {
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  double worst = 0;
  for (size_t i = 0; i < store.size(); ++i) {
    const std::string& p = store.spec(i).name;
    worst = std::max(worst, test::max_abs_diff(load("final." + name + "." + p + ".npy"), load("final_fp32." + name + "." + p + ".npy")));
  }
  EXPECT_LT(worst, tolerance / 10) << name << ": the reference's fp32 and fp64 runs part by " << worst;
}

TEST_F(OptimReference, SoapOneSidedFrequency2) {
  expect_well_conditioned("soap_one_sided_freq2", 2e-6, load);
  check_case("soap_one_sided_freq2", 2e-6);
}

TEST_F(OptimReference, SoapFrequency1NormalizedShampooBetaNoBiasCorrectionClipped) {
  expect_well_conditioned("soap_freq1_normalize_shampoo_beta_clip", 2e-6, load);
  check_case("soap_freq1_normalize_shampoo_beta_clip", 2e-6);
}

TEST_F(OptimReference, SoapCautiousWeightDecayFrequency3) {
  expect_well_conditioned("soap_cautious_freq3", 2e-6, load);
  check_case("soap_cautious_freq3", 2e-6);
}

// NorMuon against the reference written from the paper's description: the same Newton–Schulz error
// as Muon's cases, scaled by the per-neuron normalisation (observed below).
TEST_F(OptimReference, NorMuonShapeScaleSplitQkv) { check_case("normuon_shape_split_qkv", 5e-7); }

TEST_F(OptimReference, NorMuonRmsMatchWholeMatrix) { check_case("normuon_rms_match_whole", 5e-7); }

TEST_F(OptimReference, ShampooRmspropNewtonRootBlocks) { check_case("shampoo_rmsprop_newton_blocks", 5e-5); }

}  // namespace
}  // namespace precon::worker
