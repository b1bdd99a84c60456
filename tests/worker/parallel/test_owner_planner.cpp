// The distributed optimizer's planner (worker/parallel/distributed_optimizer.h): which rank computes
// each unit of a step and how the results reach every rank, seen from one rank of a group whose
// other members are simulated (each sends values that name it). Over real ranks it is checked
// through the optimizers' runs against the single process (ParallelOptim, NextOptimizersParallel,
// Parallel.*ForEveryOptimizer).
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "worker/optim/exchange.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/distributed_optimizer.h"

namespace precon::worker {
namespace {

const kernels::Device kPlannerCpu = kernels::Device::cpu;

// Member `index` of `count`: share() puts the own values at this member's place and, at member q's,
// the values 1000·q + i; max() keeps the flags. Counts the calls and values shared.
class SimulatedGroup final : public ShareGroup {
 public:
  SimulatedGroup(int index, int count) : index_(index), count_(count) {}
  int index() const override { return index_; }
  int count() const override { return count_; }
  int64_t share(const float* own, float* all, int64_t n, kernels::DType, kernels::Device) override {
    ++shares;
    shared.push_back(n);
    for (int q = 0; q < count_; ++q)
      for (int64_t i = 0; i < n; ++i) all[q * n + i] = q == index_ ? own[i] : static_cast<float>(1000 * q + i);
    return n * 4;
  }
  void sum(float*, int64_t) override {}
  void sum(double*, int64_t) override {}
  void max(int64_t*, int64_t) override { ++maxes; }
  int shares = 0, maxes = 0;
  std::vector<int64_t> shared;

 private:
  int index_, count_;
};

using Arrival = std::tuple<size_t, size_t, int64_t, int64_t, float>;  // unit, part, first, n, first value

std::vector<Arrival> share_all(OwnedResults& r) {
  std::vector<Arrival> out;
  double gather = 0, apply = 0;
  r.share([&](size_t u, size_t p, int64_t first, int64_t n, const float* v) { out.emplace_back(u, p, first, n, v[0]); },
          gather, apply);
  return out;
}

TEST(OwnerPlanner, AssignsOwnersGreedilyAndHandsEveryResultToEveryRank) {
  // Three units of one part over two ranks: the largest (unit 1) to rank 0, then unit 0 (cost 3)
  // to rank 1, then unit 2 to rank 1 (load 3 < 5).
  auto group = std::make_shared<SimulatedGroup>(1, 2);
  ASSERT_EQ(assign_owners({3, 5, 1}, 2), (std::vector<int>{1, 0, 1}));
  auto r = owner_planner(group, 1)({{3, {4}}, {5, {6}}, {1, {2}}}, kernels::DType::f32, 0, kPlannerCpu);
  EXPECT_TRUE(r->distributed());
  EXPECT_EQ(r->who(), "rank 1");
  EXPECT_FALSE(r->mine(1));
  EXPECT_TRUE(r->mine(0));
  EXPECT_TRUE(r->mine(2));
  EXPECT_EQ(r->owner(1), 0);
  EXPECT_EQ(r->root(0), 1);
  EXPECT_FALSE(r->primary());  // data index 1
  // This rank's results back to back: unit 0 at 0, unit 2 at 4.
  for (int i = 0; i < 4; ++i) r->own(0)[i] = 10.0f + i;
  for (int i = 0; i < 2; ++i) r->own(2)[i] = 20.0f + i;
  EXPECT_EQ(r->own(2) - r->own(0), 4);
  // One all-gather of the largest segment (6 values, rank 0's), every unit whole, in unit order.
  const std::vector<Arrival> got = share_all(*r);
  EXPECT_EQ(group->shares, 1);
  EXPECT_EQ(group->shared, (std::vector<int64_t>{6}));
  EXPECT_EQ(got, (std::vector<Arrival>{{0, 0, 0, 4, 10.0f}, {1, 0, 0, 6, 0.0f}, {2, 0, 0, 2, 20.0f}}));
  EXPECT_EQ(r->comm_bytes(), 24);
  int64_t flags[3] = {0, 1, 0};
  r->max(flags, 3);
  EXPECT_EQ(group->maxes, 1);
}

TEST(OwnerPlanner, ChunksCutTheResultsIntoRangesAppliedAsTheyArrive) {
  auto group = std::make_shared<SimulatedGroup>(0, 2);
  // Unit 0 (cost 9) to rank 0, unit 1 to rank 1: segments of 5 values, chunks of 2.
  auto r = owner_planner(group, 1)({{9, {5}}, {1, {3}}}, kernels::DType::f32, 2, kPlannerCpu);
  for (int i = 0; i < 5; ++i) r->own(0)[i] = 10.0f + i;
  const std::vector<Arrival> got = share_all(*r);
  EXPECT_EQ(group->shared, (std::vector<int64_t>{2, 2, 1}));
  // Rank 1's values at chunk c are 1000 + i, i its index in the chunk.
  EXPECT_EQ(got, (std::vector<Arrival>{{0, 0, 0, 2, 10.0f},
                                       {1, 0, 0, 2, 1000.0f},
                                       {0, 0, 2, 2, 12.0f},
                                       {1, 0, 2, 1, 1000.0f},
                                       {0, 0, 4, 1, 14.0f}}));
}

TEST(OwnerPlanner, AUnitInPartsGoesToADataIndexAndEachPartToItsTensorRank) {
  // Four ranks: data × tensor = 2 × 2; this is group rank 3 (data index 1, tensor rank 1).
  auto group = std::make_shared<SimulatedGroup>(3, 4);
  auto tp = std::make_shared<SimulatedGroup>(1, 2);
  // Unit 0 in two parts (cost 8: data index 0 of 2, rank 0 of 4), unit 1 whole (cost 4: by rank, rank 1).
  ASSERT_EQ(assign_owners({8, 4}, 2), (std::vector<int>{0, 1}));
  ASSERT_EQ(assign_owners({8, 4}, 4), (std::vector<int>{0, 1}));
  auto r = owner_planner(group, 2, tp.get())({{8, {3, 3}}, {4, {2}}}, kernels::DType::f32, 0, kPlannerCpu);
  EXPECT_FALSE(r->holds(0));  // data index 0 computes unit 0
  EXPECT_EQ(r->root(0), 0);
  EXPECT_EQ(r->part(0), 1u);
  EXPECT_TRUE(r->applies(0, 1));   // the part its own tensor rank computed
  EXPECT_FALSE(r->applies(0, 0));
  EXPECT_TRUE(r->applies(1, 0));   // a whole unit: every rank applies what it holds
  EXPECT_EQ(r->owner(1), 1);
  EXPECT_EQ(r->root(1), 0);        // rank 1 is data index 0
  EXPECT_FALSE(r->ours(1));        // its data index (0) is not this rank's
  const std::vector<Arrival> got = share_all(*r);
  // Parts on ranks 0 and 1 (data index 0), unit 1 after unit 0's part on rank 1.
  EXPECT_EQ(got, (std::vector<Arrival>{{0, 0, 0, 3, 0.0f}, {0, 1, 0, 3, 1000.0f}, {1, 0, 0, 2, 1003.0f}}));
}

TEST(OwnerPlanner, GroupsOfTheWrongShapeAreRefused) {
  auto group = std::make_shared<SimulatedGroup>(1, 3);
  EXPECT_THROW(owner_planner(group, 2), OptimizerError);  // 3 ranks are not data × 2
  auto four = std::make_shared<SimulatedGroup>(1, 4);
  auto tp = std::make_shared<SimulatedGroup>(0, 2);
  EXPECT_THROW(owner_planner(four, 2, tp.get()), OptimizerError);  // tensor rank 1 expected
  EXPECT_THROW(owner_planner(four, 2), OptimizerError);            // no tensor-parallel group
  EXPECT_EQ(owner_planner(nullptr, 1), nullptr);
}

TEST(OwnerPlanner, RangesCutTheValuesIntoEqualRunsAndGatherTheOthers) {
  // Rank 1 of 3 over 10 values: runs of ceil(10 / 3) = 4, this rank's [4, 8), the last one short.
  auto group = std::make_shared<SimulatedGroup>(1, 3);
  auto r = range_planner(group)(10, kPlannerCpu);
  EXPECT_EQ(r->lo(), 4);
  EXPECT_EQ(r->hi(), 8);
  EXPECT_EQ(r->root(0, 4), 0);
  EXPECT_EQ(r->root(3, 2), -1);  // spans ranks 0 and 1
  EXPECT_EQ(r->root(8, 2), 2);
  EXPECT_EQ(r->root(5, 0), -1);
  // One chunk of 4 a rank: this rank's values packed, then rank 0's and rank 2's unpacked.
  std::vector<std::tuple<int64_t, int64_t, bool, float>> copies;  // from, to, into_buf, first value
  r->share([&](int64_t from, int64_t to, float* buf, bool into_buf) {
    if (into_buf) buf[0] = 7.0f;
    copies.emplace_back(from, to, into_buf, buf[0]);
  });
  EXPECT_EQ(group->shared, (std::vector<int64_t>{4}));
  EXPECT_EQ(copies, (std::vector<std::tuple<int64_t, int64_t, bool, float>>{
                        {4, 8, true, 7.0f}, {0, 4, false, 0.0f}, {8, 10, false, 2000.0f}}));
  EXPECT_EQ(r->comm_bytes(), 16);
  // One rank (or none): no ranges, every rank updates every value.
  EXPECT_EQ(range_planner(std::make_shared<SimulatedGroup>(0, 1)), nullptr);
  EXPECT_EQ(range_planner(nullptr), nullptr);
}

TEST(OwnerPlanner, OneRankComputesAndAppliesEveryUnitInPlace) {
  auto r = solo_results({{1, {2}}, {7, {3}}}, kPlannerCpu);
  EXPECT_FALSE(r->distributed());
  EXPECT_TRUE(r->mine(0) && r->mine(1) && r->primary());
  r->own(0)[0] = 1.0f;
  r->own(1)[0] = 2.0f;
  EXPECT_EQ(share_all(*r), (std::vector<Arrival>{{0, 0, 0, 2, 1.0f}, {1, 0, 0, 3, 2.0f}}));
  EXPECT_THROW(solo_results({{1, {2, 2}}}, kPlannerCpu), OptimizerError);
}

}  // namespace
}  // namespace precon::worker
