// Newton–Schulz and inverse roots against PyTorch (results written by torch_reference.py).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kernels/inverse_root.h"
#include "kernels/newton_schulz.h"
#include "tests/common/npy.h"
#include "tests/common/test_util.h"

namespace precon::kernels {
namespace {

const std::string kDir = PRECON_TORCH_REF_DIR;

std::vector<float> as_float(const test::NpyArray& a) { return {a.values.begin(), a.values.end()}; }

std::vector<std::vector<std::string>> manifest() {
  std::ifstream in(kDir + "/manifest.txt");
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<std::string> row;
    for (std::string w; ss >> w;) row.push_back(w);
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

TEST(TorchReference, ManifestPresent) {
  EXPECT_GE(manifest().size(), 10u) << "torch_reference.py did not write " << kDir << "/manifest.txt";
}

TEST(TorchReference, NewtonSchulzMatchesTorch) {
  int cases = 0;
  for (const auto& row : manifest()) {
    if (row[0] != "ns") continue;
    SCOPED_TRACE(row[1] + " " + row[2] + " steps=" + row[3]);
    test::NpyArray in = test::read_npy(kDir + "/" + row[1] + "_in.npy");
    test::NpyArray expect = test::read_npy(kDir + "/" + row[1] + "_out.npy");
    std::vector<float> g = as_float(in), out(g.size());
    Tensor tg = Tensor::view(g.data(), {in.shape[0], in.shape[1]});
    Tensor to = Tensor::view(out.data(), {in.shape[0], in.shape[1]});
    NsOptions opt{ns_schedule(ns_coefficient_set(row[2]), std::stoi(row[3])), std::stof(row[4]), DType::f32};
    newton_schulz(to, tg, opt);
    // Two fp32 implementations with different summation orders: each step's polynomial has slope
    // up to ~3.4 (keller) or ~8 (polar-express's first step), so round-off grows by that factor.
    // Entries are O(1); 5e-4 absolute is ~1e3 ulps of slack and still catches any wrong coefficient.
    EXPECT_LT(test::max_abs_diff(out, as_float(expect)), 5e-4);
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

TEST(TorchReference, InverseRootMatchesTorchEighFp64) {
  int cases = 0;
  for (const auto& row : manifest()) {
    if (row[0] != "root") continue;
    SCOPED_TRACE(row[1] + " p=" + row[2] + " eps=" + row[3] + " cond=" + row[4]);
    test::NpyArray in = test::read_npy(kDir + "/" + row[1] + "_in.npy");
    test::NpyArray expect = test::read_npy(kDir + "/" + row[1] + "_out.npy");
    std::vector<float> a = as_float(in);
    const double cond = std::stod(row[4]);
    for (RootMethod method : {RootMethod::eigh, RootMethod::newton}) {
      SCOPED_TRACE(method == RootMethod::eigh ? "eigh" : "newton");
      std::vector<float> out(a.size());
      InverseRootOptions opt;
      opt.root = std::stod(row[2]);
      opt.epsilon = std::stof(row[3]);
      opt.method = method;
      matrix_inverse_root(Tensor::view(out.data(), {in.shape[0], in.shape[0]}),
                          Tensor::view(a.data(), {in.shape[0], in.shape[0]}), opt);
      // fp32 eigen/Newton error relative to torch's fp64 eigh grows with the condition number:
      // about cond·1e-7·(1/p) in the smallest eigen-directions; allow 10x that with a 1e-5 floor.
      const double tol = std::max(1e-5, 10.0 * cond * 1e-7);
      EXPECT_LT(test::rel_frobenius(out, as_float(expect)), tol);
    }
    ++cases;
  }
  EXPECT_GE(cases, 3);
}

}  // namespace
}  // namespace precon::kernels
