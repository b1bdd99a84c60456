// The optimizers' exchanges (worker/optim/exchange.h) as worker/parallel implements them over a
// communicator (optimizer_groups.h), and the group of one an optimizer uses when given none. Over
// several ranks they are checked through the optimizers' runs against the single process
// (ParallelOptim, NextOptimizersParallel, Parallel.*ForEveryOptimizer).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "worker/optim/exchange.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/optimizer_groups.h"

namespace precon::worker {
namespace {

const kernels::Device kCpu = kernels::Device::cpu;

TEST(ShareGroups, OverOneRankShareHandsBackTheOwnValuesInTheDtypeAsked) {
  auto comm = make_local_communicator();
  std::shared_ptr<ShareGroup> group = share_group(comm.get());
  ASSERT_TRUE(group);
  EXPECT_EQ(group->index(), 0);
  EXPECT_EQ(group->count(), 1);
  // 1 + 2^-10 lies between two bf16 values (1 and 1 + 2^-7) and rounds to 1; the others are bf16 values.
  const std::vector<float> own = {1.0f, -2.5f, 0.15625f, 1.0f + 1.0f / 1024};
  std::vector<float> all(own.size(), 7.0f);
  EXPECT_EQ(group->share(own.data(), all.data(), 4, kernels::DType::f32, kCpu), 0);  // nothing sent to itself
  EXPECT_EQ(all, own);
  EXPECT_EQ(group->share(own.data(), all.data(), 4, kernels::DType::bf16, kCpu), 0);
  EXPECT_EQ(all, (std::vector<float>{1.0f, -2.5f, 0.15625f, 1.0f}));
  // Sums and maxima over one rank are the values given.
  float f[2] = {1.5f, -3.0f};
  double d[1] = {0.25};
  int64_t i[2] = {4, -9};
  group->sum(f, 2);
  group->sum(d, 1);
  group->max(i, 2);
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], -3.0f);
  EXPECT_EQ(d[0], 0.25);
  EXPECT_EQ(i[0], 4);
  EXPECT_EQ(i[1], -9);
  EXPECT_EQ(share_group(nullptr), nullptr);
}

TEST(ShareGroups, TheGroupOfOneCopiesItsOwnValues) {
  std::shared_ptr<ShareGroup> solo = solo_group();
  EXPECT_EQ(solo->index(), 0);
  EXPECT_EQ(solo->count(), 1);
  const std::vector<float> own = {3.0f, 1.0f + 1.0f / 1024};
  std::vector<float> all(2, 0.0f);
  EXPECT_EQ(solo->share(own.data(), all.data(), 2, kernels::DType::f32, kCpu), 0);
  EXPECT_EQ(all, own);
  int64_t flags[1] = {1};
  solo->max(flags, 1);
  EXPECT_EQ(flags[0], 1);
}

}  // namespace
}  // namespace precon::worker
