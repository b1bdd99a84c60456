// The optimizers' FLOP counts (worker/optim/flops.h): the matrix products against PyTorch's own
// counter around plain torch implementations (optim_flops_reference.py), the decomposition
// constants against the textbook formulas, the cumulative count against the sum of the steps, and
// the trainer's optim_flops / compute_flops in metrics.jsonl.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/test_util.h"
#include "tests/worker/support/mpi_run_fixture.h"
#include "tests/worker/support/optim_util.h"
#include "worker/config/parse.h"
#include "worker/optim/flops.h"
#include "worker/optim/optimizer.h"

namespace precon::worker {
namespace {

double cube_of(int64_t n) { return static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n); }

// The decompositions the reference recorded ([["eigh", n], ["qr", n], ...]) at flops.h's constants.
double recorded_decompositions(const nlohmann::json& list) {
  double total = 0;
  for (const auto& d : list)
    total += (d[0] == "eigh" ? kEighCube : kQrCube) * cube_of(d[1].get<int64_t>());
  return total;
}

std::vector<kernels::NsCoefficients> flops_test_schedule(const std::string& label) {
  if (label == "keller5") return kernels::ns_schedule("keller", 5);
  if (label == "keller3") return kernels::ns_schedule("keller", 3);
  return kernels::ns_schedule("cubic5", 5);
}

class OptimFlopsTorch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string out = (std::filesystem::temp_directory_path() /
                             ("precon_optim_flops_" + std::to_string(::getpid()) + ".json")).string();
    const std::string cmd = std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR +
                            "/tests/worker/optim/flops_reference.py > " + out;
    const int status = std::system(cmd.c_str());
    reference_ = new nlohmann::json();
    if (status == 0) *reference_ = nlohmann::json::parse(test::slurp(out));
    std::filesystem::remove(out);
  }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }
  static const nlohmann::json& reference(const char* section) {
    static const nlohmann::json empty = nlohmann::json::array();
    if (!reference_->contains(section)) {
      ADD_FAILURE() << "optim_flops_reference.py wrote no '" << section << "' (needs " << PRECON_PYTHON << " with torch)";
      return empty;
    }
    return (*reference_)[section];
  }
  static nlohmann::json* reference_;
};

nlohmann::json* OptimFlopsTorch::reference_ = nullptr;

TEST_F(OptimFlopsTorch, NewtonSchulzProductsMatchTorchForSquareWideAndTallMatrices) {
  int checked = 0;
  for (const auto& c : reference("ns")) {
    const FlopSplit f = newton_schulz_flops(c["rows"], c["cols"], flops_test_schedule(c["schedule"]));
    EXPECT_EQ(f.matmul, c["matmul"].get<double>()) << c.dump();
    EXPECT_EQ(f.decomposition, 0.0);
    ++checked;
  }
  EXPECT_EQ(checked, 9);
  std::printf("counter: %s\n", (*reference_).value("counter", std::string("none")).c_str());
}

TEST_F(OptimFlopsTorch, ShampooStatisticsPreconditioningAndRootsMatchTorch) {
  for (const auto& c : reference("shampoo_block")) {
    const FlopSplit f = shampoo_statistics_flops(c["rows"], c["cols"]) + shampoo_precondition_flops(c["rows"], c["cols"]);
    EXPECT_EQ(f.matmul, c["matmul"].get<double>()) << c.dump();
  }
  int roots = 0;
  for (const auto& c : reference("root")) {
    RootFlopOptions o;
    o.newton = c["method"] == "newton";
    o.p = c["p"];
    o.newton_iterations = c["iterations"];
    const FlopSplit f = inverse_root_flops(c["n"], o);
    EXPECT_EQ(f.matmul, c["matmul"].get<double>()) << c.dump();
    EXPECT_EQ(f.decomposition, recorded_decompositions(c["decompositions"])) << c.dump();
    ++roots;
  }
  EXPECT_EQ(roots, 8);
}

TEST_F(OptimFlopsTorch, SoapRotationsAndRefreshesMatchTorch) {
  for (const auto& c : reference("soap_rotation")) {
    const FlopSplit f = 2.0 * soap_rotation_flops(c["rows"], c["cols"], c["left"], c["right"]);
    EXPECT_EQ(f.matmul, c["matmul"].get<double>()) << c.dump();
  }
  for (const auto& c : reference("soap_refresh")) {
    const int64_t rows = c["rows"], cols = c["cols"];
    FlopSplit f = 2.0 * soap_rotation_flops(rows, cols, c["left"], c["right"]);
    if (c["left"]) f += soap_refresh_side_flops(rows);
    if (c["right"]) f += soap_refresh_side_flops(cols);
    EXPECT_EQ(f.matmul, c["matmul"].get<double>()) << c.dump();
    EXPECT_DOUBLE_EQ(f.decomposition, recorded_decompositions(c["decompositions"])) << c.dump();
  }
}

// Whole steps of each optimizer on the tiny GPT-2 of optim_reference.py: the routing, the Q/K/V
// split, Muon's split by heads, Shampoo's blocks, start and refresh schedule, SOAP's first step and
// refreshes.
TEST_F(OptimFlopsTorch, WholeStepsMatchTorchStepByStep) {
  const std::vector<ParamSpec> table = gpt2_param_table(testing::tiny_model());
  int cases = 0;
  for (const auto& c : reference("whole")) {
    const OptimizerFlopCount count(testing::config_from_json(c["config"]), table);
    for (const auto& s : c["steps"]) {
      const FlopSplit f = count.at(s["step"]);
      EXPECT_EQ(f.matmul, s["matmul"].get<double>()) << c["name"] << " step " << s["step"];
      EXPECT_DOUBLE_EQ(f.decomposition, recorded_decompositions(s["decompositions"])) << c["name"] << " step " << s["step"];
    }
    ++cases;
  }
  EXPECT_EQ(cases, 9);
}

TEST(OptimFlops, DecompositionConstantsAreTheTextbookCounts) {
  // Golub & Van Loan: symmetric QR with Q accumulated ≈ 9n³; Householder QR of m × n, 2n²(m − n/3),
  // and forming Q explicitly, 4(m²n − mn² + n³/3), at m = n.
  EXPECT_EQ(kEighCube, 9.0);
  EXPECT_EQ(kEigenReconstructCube, 2.0);
  const double n = 1.0, m = 1.0;
  EXPECT_DOUBLE_EQ(kQrCube, 2 * n * n * (m - n / 3) + 4 * (m * m * n - m * n * n + n * n * n / 3));
  EXPECT_DOUBLE_EQ(kQrCube, 8.0 / 3.0);
  // As used: an eigh root of n is 9n³ + the 2n³ reconstruction; a SOAP side refresh is one QR.
  const FlopSplit root = inverse_root_flops(100, {});
  EXPECT_EQ(root.decomposition, 9.0 * 1e6);
  EXPECT_EQ(root.matmul, 2.0 * 1e6);
  EXPECT_DOUBLE_EQ(soap_refresh_side_flops(100).decomposition, 8.0 / 3.0 * 1e6);
  EXPECT_EQ(soap_refresh_side_flops(100).matmul, 2.0 * 1e6);
  // AdamW's per-element count: s·g, m (2 products, 1 add), v (3 products, 1 add), the update
  // (√, × 1/√bc2, + ε, ÷, × step size), the decayed parameter (× decay, −).
  EXPECT_EQ(kAdamWPerElement, 1 + 3 + 4 + 5 + 2);
}

OptimizerConfig flops_test_config(const std::string& name, const std::vector<std::string>& sets = {}) {
  ParsedConfig parsed;
  apply_override(parsed, "optimizer.name=\"" + name + "\"");
  for (const std::string& s : sets) apply_override(parsed, "optimizer." + s);
  return parsed.config.optimizer;
}

TEST(OptimFlops, CumulativeCountIsTheSumOfTheStepsAtEveryStep) {
  ModelConfig model = testing::tiny_model();
  model.n_layer = 2;
  const std::vector<ParamSpec> table = gpt2_param_table(model);
  const std::vector<OptimizerConfig> configs = {
      flops_test_config("adamw"),
      flops_test_config("muon", {"muon.ns_steps=3"}),
      flops_test_config("shampoo", {"shampoo.precondition_frequency=1"}),
      flops_test_config("shampoo", {"shampoo.precondition_frequency=10"}),
      flops_test_config("shampoo", {"shampoo.precondition_frequency=4", "shampoo.start_preconditioning_step=1"}),
      flops_test_config("shampoo", {"shampoo.precondition_frequency=3", "shampoo.start_preconditioning_step=5",
                                    "shampoo.root_method=\"newton\""}),
      flops_test_config("soap", {"soap.precondition_frequency=1"}),
      flops_test_config("soap", {"soap.precondition_frequency=7", "soap.max_preconditioner_dim=20"}),
  };
  for (const OptimizerConfig& c : configs) {
    const OptimizerFlopCount count(c, table);
    FlopSplit sum;
    EXPECT_EQ(count.optimizer_flops_through(0), 0.0);
    for (int64_t t = 1; t <= 80; ++t) {
      sum += count.at(t);
      // Products and element-wise counts are integers here, so both sums are exact; QR's 8/3 is not,
      // and the running sum rounds at each addition.
      const FlopSplit through = count.through(t);
      EXPECT_EQ(through.matmul, sum.matmul) << c.name << " step " << t;
      EXPECT_NEAR(through.decomposition, sum.decomposition, 1e-13 * sum.decomposition) << c.name << " step " << t;
      EXPECT_EQ(through.elementwise, sum.elementwise) << c.name << " step " << t;
    }
    // The summary's per-step figure is the average over whole refresh periods once steady.
    const OptimizerFlops s = count.summary();
    const int64_t period = std::max<int64_t>(1, s.refresh_every), from = 10;
    const double average = (count.optimizer_flops_through(from + 6 * period) - count.optimizer_flops_through(from)) /
                           static_cast<double>(6 * period);
    EXPECT_NEAR(average, s.per_step(), 1e-12 * s.per_step()) << c.name;
    EXPECT_DOUBLE_EQ(s.first.total(), count.optimizer_flops(1)) << c.name;
  }
}

TEST(OptimFlops, ARefreshStepAddsTheRefreshAndOthersDoNot) {
  const std::vector<ParamSpec> table = gpt2_param_table(testing::tiny_model());
  const OptimizerFlopCount shampoo(flops_test_config("shampoo", {"shampoo.precondition_frequency=5"}), table);
  const OptimizerFlops s = shampoo.summary();
  ASSERT_GT(s.refresh.total(), 0.0);
  EXPECT_EQ(s.refresh_every, 5);
  // Steps 1-4 precede preconditioning; 5 starts it with a refresh; then every fifth.
  EXPECT_LT(shampoo.optimizer_flops(4), s.step.total());
  EXPECT_DOUBLE_EQ(shampoo.optimizer_flops(5), s.step.total() + s.refresh.total());
  EXPECT_DOUBLE_EQ(shampoo.optimizer_flops(6), s.step.total());
  EXPECT_DOUBLE_EQ(shampoo.optimizer_flops(10), s.step.total() + s.refresh.total());
  const OptimizerFlopCount soap(flops_test_config("soap", {"soap.precondition_frequency=3"}), table);
  // SOAP: step 1 builds the bases; refreshes after updates 3, 6, ... (steps 4, 7, ...).
  EXPECT_GT(soap.at(1).decomposition, 0.0);
  EXPECT_EQ(soap.at(2).decomposition, 0.0);
  EXPECT_GT(soap.at(4).decomposition, 0.0);
  EXPECT_DOUBLE_EQ(soap.optimizer_flops(7) - soap.optimizer_flops(6), soap.summary().refresh.total());
  OptimizerConfig unknown;
  unknown.name = "lion";
  EXPECT_THROW(OptimizerFlopCount(unknown, table), OptimizerError);
}

// GPT-2 124M (batch 8 × 1024 tokens): the optimizers' FLOPs per step as a share of the model's.
TEST(OptimFlops, Gpt2SmallSharesOfTheModelFlops) {
  ModelConfig model;
  model.n_layer = 12;
  model.n_head = 12;
  model.d_model = 768;
  model.seq_len = 1024;
  model.vocab_size = 50257;
  const std::vector<ParamSpec> table = gpt2_param_table(model);
  // Model::flops_per_token's formula: 6 per weight of a product (the tied head included) + attention.
  double weights = 0;
  for (const ParamSpec& s : table)
    if (s.kind == ParamKind::matrix || (s.kind == ParamKind::embedding && s.head_end)) weights += static_cast<double>(s.numel());
  const double tokens = 8.0 * 1024, model_step = (6.0 * weights + 12.0 * 12 * 768 * 1024) * tokens;
  struct Row {
    const char* label;
    OptimizerConfig config;
  };
  const std::vector<Row> rows = {
      {"AdamW", flops_test_config("adamw")},
      {"Muon ns5", flops_test_config("muon", {"muon.ns_steps=5"})},
      {"Muon ns3", flops_test_config("muon", {"muon.ns_steps=3"})},
      {"Shampoo f=1", flops_test_config("shampoo", {"shampoo.precondition_frequency=1"})},
      {"Shampoo f=10", flops_test_config("shampoo", {"shampoo.precondition_frequency=10"})},
      {"Shampoo f=50", flops_test_config("shampoo", {"shampoo.precondition_frequency=50"})},
      {"SOAP f=10", flops_test_config("soap", {"soap.precondition_frequency=10"})},
  };
  std::printf("model: %.4g FLOPs per step (%.4g per token)\n", model_step, model_step / tokens);
  std::printf("| optimizer | per step | share | products | element-wise | refresh (each) |\n");
  std::vector<double> per_step;
  for (const Row& r : rows) {
    const OptimizerFlops f = OptimizerFlopCount(r.config, table).summary();
    per_step.push_back(f.per_step());
    std::printf("| %s | %.4g | %.3f%% | %.4g | %.4g | %.4g |\n", r.label, f.per_step(), 100.0 * f.per_step() / model_step,
                f.step.matmul, f.step.elementwise, f.refresh.total());
  }
  // Muon's products by hand: per layer Q, K, V and attn.c_proj are 768², c_fc and mlp.c_proj 768 × 3072;
  // per NS step 4m²n + 2m³ on the wide orientation.
  const double m = 768, n = 3072;
  const double ns_step = 4 * (4 * m * m * m + 2 * m * m * m) + 2 * (4 * m * m * n + 2 * m * m * m);
  EXPECT_DOUBLE_EQ(OptimizerFlopCount(rows[1].config, table).summary().step.matmul, 12 * 5 * ns_step);
  EXPECT_DOUBLE_EQ(OptimizerFlopCount(rows[2].config, table).summary().step.matmul, 12 * 3 * ns_step);
  EXPECT_GT(per_step[1], per_step[2]);
  EXPECT_GT(per_step[3], per_step[4]);
  EXPECT_GT(per_step[4], per_step[5]);
}

class OptimFlopsRun : public mpitest::MpiRunFixture {};

// metrics.jsonl's optim_flops is the count through each step, and compute_flops = flops + optim_flops.
void expect_flops_records(const std::map<int, double>& optim, const std::map<int, double>& model,
                          const std::map<int, double>& compute, const OptimizerFlopCount& count, size_t steps) {
  ASSERT_EQ(optim.size(), steps);
  ASSERT_EQ(model.size(), steps);
  ASSERT_EQ(compute.size(), steps);
  for (const auto& [step, value] : optim) {
    EXPECT_EQ(value, count.optimizer_flops_through(step)) << "step " << step;
    EXPECT_EQ(compute.at(step), model.at(step) + value) << "step " << step;
  }
}

TEST_F(OptimFlopsRun, TrainerReportsOptimizerAndComputeFlops) {
  struct FlopsRunCase {
    std::string dir, extra;
    int steps;
  };
  const std::vector<FlopsRunCase> runs = {
      {"muon5", "[optimizer]\nname = \"muon\"\nlr = 0.02\n[optimizer.muon]\nns_steps = 5\n", 4},
      {"muon3", "[optimizer]\nname = \"muon\"\nlr = 0.02\n[optimizer.muon]\nns_steps = 3\n", 4},
      {"shampoo1", "[optimizer]\nname = \"shampoo\"\nlr = 0.003\n[optimizer.shampoo]\nprecondition_frequency = 1\n", 12},
      {"shampoo10", "[optimizer]\nname = \"shampoo\"\nlr = 0.003\n[optimizer.shampoo]\nprecondition_frequency = 10\n", 12},
  };
  std::map<std::string, std::map<int, double>> optim;
  for (const FlopsRunCase& r : runs) {
    const std::filesystem::path cfg = config(r.extra, r.steps);
    const auto t0 = std::chrono::steady_clock::now();
    const mpitest::Result res = run(trainer(cfg, r.dir));
    ASSERT_EQ(res.status, 0) << res.output;
    EXPECT_NE(res.output.find("optimizer flops: "), std::string::npos) << res.output;
    const ParsedConfig parsed = parse_config_file(cfg.string());
    const OptimizerFlopCount count(parsed.config.optimizer, model_param_table(parsed.config.model));
    optim[r.dir] = series(r.dir, "optim_flops");
    expect_flops_records(optim[r.dir], series(r.dir, "flops"), series(r.dir, "compute_flops"), count,
                         static_cast<size_t>(r.steps));
    std::printf("%s: %d steps in %.1f s, optim_flops at the end %.6g\n", r.dir.c_str(), r.steps,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), optim[r.dir].rbegin()->second);
  }
  // Two Newton–Schulz steps fewer, by hand for the fixture's model (2 layers, d_model 32): per layer
  // Q, K, V, attn.c_proj are 32 × 32 and c_fc, mlp.c_proj 32 × 128; per step 4m²n + 2m³ products,
  // 3m² + 2mn element-wise.
  auto ns_step = [](double m, double n) { return 4 * m * m * n + 2 * m * m * m + 3 * m * m + 2 * m * n; };
  const double saved = 2 * 2 * (4 * ns_step(32, 32) + 2 * ns_step(32, 128));
  for (const auto& [step, value] : optim["muon5"]) EXPECT_EQ(value - optim["muon3"].at(step), saved * step) << step;
  // Shampoo: the refresh every step costs more from the first step on; frequency 10 refreshes at 10.
  for (const auto& [step, value] : optim["shampoo1"]) EXPECT_GT(value, optim["shampoo10"].at(step)) << step;
  const auto& f10 = optim["shampoo10"];
  EXPECT_GT(f10.at(10) - f10.at(9), f10.at(12) - f10.at(11));
}

}  // namespace
}  // namespace precon::worker
