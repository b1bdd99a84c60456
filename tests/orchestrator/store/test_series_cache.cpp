// Series block summaries: downsampling through them picks exactly what the naive scan picks,
// after appends, resends and out-of-order inserts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "orchestrator/store/series_cache.h"
#include "tests/orchestrator/support/downsample_reference.h"
#include "tests/common/test_util.h"

namespace precon::orch {
namespace {

using testing::reference_downsample;
using test::kNaN;

TEST(SeriesBlocks, DownsampleMatchesReferenceAfterAppendsReplacementsAndInserts) {
  // Points arrive in chunks, some resent with new values, some filling gaps out of order; a run
  // of NaN covers whole blocks. The block summaries must give the reference's selection.
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0, 1);
  const int64_t n = 70000;
  std::map<int64_t, double> truth;
  Series series;
  auto value_at = [&](int64_t step) {
    if (step >= 3000 && step < 3900) return kNaN;  // > 3 blocks of NaN only
    return std::round(8 * noise(rng)) / 8;
  };
  std::vector<int64_t> order;
  for (int64_t step = 0; step < n; ++step)
    if (step % 7 != 3) order.push_back(step);  // every 7th step comes later, out of order
  for (int64_t step = 3; step < n; step += 7) order.push_back(step);
  for (size_t off = 0; off < order.size(); off += 1000) {
    std::vector<SeriesPoint> chunk;
    for (size_t i = off; i < std::min(order.size(), off + 1000); ++i) {
      const double v = value_at(order[i]);
      truth[order[i]] = v;
      chunk.push_back({order[i], v, 0.0});
    }
    if (off % 5000 == 0 && off > 0) {  // resend some earlier steps with new values
      for (int64_t step = static_cast<int64_t>(off) - 900; step < static_cast<int64_t>(off) - 800; ++step) {
        const double v = step == 12345 ? 1e9 : value_at(step);
        truth[step] = v;
        chunk.push_back({step, v, 1.0});
      }
    }
    series.merge(chunk);
  }
  std::vector<double> values;
  for (const auto& [step, v] : truth) values.push_back(v);
  ASSERT_EQ(series.values.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_TRUE(series.values[i] == values[i] || (std::isnan(series.values[i]) && std::isnan(values[i]))) << i;
  for (size_t m : {size_t{1}, size_t{3}, size_t{4}, size_t{8}, size_t{100}, size_t{2000}, size_t{30001}}) {
    SCOPED_TRACE(m);
    EXPECT_EQ(downsample(series, m), reference_downsample(values, m));
  }
  Series rebuilt;  // a loaded series indexed at once gives the same
  rebuilt.steps = series.steps;
  rebuilt.values = series.values;
  rebuilt.reindex();
  EXPECT_EQ(rebuilt.block_min, series.block_min);
  EXPECT_EQ(rebuilt.block_max, series.block_max);
}

}  // namespace
}  // namespace precon::orch
