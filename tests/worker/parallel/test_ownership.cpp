// The owner assignment of the distributed optimizer (worker/parallel/distributed_optimizer.h):
// every matrix gets exactly one owner, the assignment is the same on every rank, and the work is
// balanced on GPT-2 124M's shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "worker/model/params.h"
#include "worker/optim/work_cost.h"
#include "worker/parallel/distributed_optimizer.h"

namespace precon::worker::optim {
namespace {

// GPT-2 124M: 12 layers, 12 heads, C = 768, T = 1024, the 50,257-token vocabulary.
ModelConfig gpt2_124m() {
  ModelConfig m;
  m.n_layer = 12;
  m.n_head = 12;
  m.d_model = 768;
  m.seq_len = 1024;
  m.vocab_size = 50257;
  return m;
}

// Muon's per-matrix Newton–Schulz costs for GPT-2 124M (12 layers, C = 768), Q, K and V split.
std::vector<double> gpt2_124m_muon_costs() {
  const ModelConfig m = gpt2_124m();
  std::vector<double> cost;
  for (const ParamSpec& s : gpt2_param_table(m)) {
    if (s.kind != ParamKind::matrix) continue;
    const int blocks = std::max(1, s.qkv_blocks);
    cost.push_back(blocks * newton_schulz_cost(s.fan_out / blocks, s.fan_in));
  }
  return cost;
}

// Shampoo's per-block refresh costs (rows³ + cols³) for GPT-2 124M's hidden matrices cut into
// blocks of max_preconditioner_dim = 1024 (the default), as optim/shampoo.cpp cuts them.
std::vector<double> gpt2_124m_shampoo_costs() {
  const ModelConfig m = gpt2_124m();
  std::vector<double> cost;
  auto pieces = [](int64_t n) {
    std::vector<int64_t> out;
    for (int64_t at = 0; at < n; at += 1024) out.push_back(std::min<int64_t>(1024, n - at));
    return out;
  };
  for (const ParamSpec& s : gpt2_param_table(m)) {
    if (s.kind != ParamKind::matrix) continue;
    for (int64_t r : pieces(s.shape[0]))
      for (int64_t c : pieces(s.shape[1])) cost.push_back(double(r) * r * r + double(c) * c * c);
  }
  return cost;
}

void expect_balanced(const std::vector<double>& cost, const char* what) {
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
  for (int ranks : {2, 4, 8}) {
    const std::vector<int> owner = assign_owners(cost, ranks);
    std::vector<double> load(ranks, 0.0);
    for (size_t i = 0; i < cost.size(); ++i) load[owner[i]] += cost[i];
    const double worst = *std::max_element(load.begin(), load.end()), mean = total / ranks;
    std::printf("%s, %d ranks: largest share %.3f of the mean\n", what, ranks, worst / mean);
    EXPECT_LE(worst, 1.25 * mean) << what << ", " << ranks << " ranks";
  }
}

TEST(Ownership, ShampooBlocksAreBalancedOnGpt2Shapes) {
  const std::vector<double> cost = gpt2_124m_shampoo_costs();
  ASSERT_EQ(cost.size(), 12u * (3 + 1 + 3 + 3));  // c_attn 768×2304: 3 blocks; c_fc, mlp.c_proj: 3 each
  expect_balanced(cost, "shampoo");
}

TEST(Ownership, GreedyByCostIsBalancedOnGpt2Shapes) {
  const std::vector<double> cost = gpt2_124m_muon_costs();
  ASSERT_EQ(cost.size(), 48u);
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
  for (int ranks : {2, 4, 8}) {
    const std::vector<int> owner = assign_owners(cost, ranks);
    std::vector<double> load(ranks, 0.0);
    for (size_t i = 0; i < cost.size(); ++i) {
      ASSERT_GE(owner[i], 0);
      ASSERT_LT(owner[i], ranks);
      load[owner[i]] += cost[i];
    }
    const double worst = *std::max_element(load.begin(), load.end()), mean = total / ranks;
    std::printf("%d ranks: largest share %.3f of the mean\n", ranks, worst / mean);
    EXPECT_LE(worst, 1.25 * mean) << ranks << " ranks";
    EXPECT_EQ(assign_owners(cost, ranks), owner) << "deterministic";
  }
}

TEST(Ownership, MoreRanksThanMatricesLeavesSomeWithout) {
  const std::vector<int> owner = assign_owners({5.0, 3.0, 1.0}, 8);
  EXPECT_EQ(owner, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(assign_owners({}, 4), std::vector<int>{});
}

TEST(Ownership, NewtonSchulzCostIsMaxTimesMinSquared) {
  EXPECT_DOUBLE_EQ(newton_schulz_cost(768, 3072), 3072.0 * 768 * 768);
  EXPECT_DOUBLE_EQ(newton_schulz_cost(3072, 768), 3072.0 * 768 * 768);
}

}  // namespace
}  // namespace precon::worker::optim
