#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "worker/common/error.h"
#include "worker/data/loader.h"
#include "tests/common/temp_dir.h"

namespace precon::worker {
namespace {

using test::TempDir;

// Tokens encode their own position (mod vocab), so a window's origin can be read back.
fs::path make_shard(const fs::path& dir, const std::string& name, int n, int offset) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>((offset + i) % 60000);
  write_shard(dir / name, t);
  return dir / name;
}

struct Fixture {
  TempDir dir;
  LoaderOptions opt;
  Fixture() {
    opt.train = {DatasetSpec({make_shard(dir.path, "train_0.bin", 1000, 0), make_shard(dir.path, "train_1.bin", 517, 20000)})};
    opt.val = {DatasetSpec({make_shard(dir.path, "val.bin", 300, 40000)})};
    opt.B = 4;
    opt.T = 16;
    opt.seed = 1234;
  }
};

TEST(Loader, TargetsAreInputsShiftedByOne) {
  Fixture f;
  DataLoader loader(f.opt);
  EXPECT_EQ(loader.train_windows(), 999 / 16 + 516 / 16);
  for (int i = 0; i < 5; ++i) {
    Batch b = loader.next();
    ASSERT_EQ(b.inputs.size(), 64u);
    for (int r = 0; r < 4; ++r) {
      const int32_t first = b.inputs[static_cast<size_t>(r * 16)];
      // Window starts are multiples of T inside one shard.
      EXPECT_TRUE(first % 16 == 0 || (first - 20000) % 16 == 0) << first;
      for (int t = 0; t < 16; ++t) {
        ASSERT_EQ(b.inputs[static_cast<size_t>(r * 16 + t)], first + t);
        ASSERT_EQ(b.targets[static_cast<size_t>(r * 16 + t)], first + t + 1);
      }
    }
  }
}

TEST(Loader, EpochVisitsEveryWindowOnce) {
  Fixture f;
  f.opt.B = 1;
  DataLoader loader(f.opt);
  std::set<int32_t> starts;
  for (int64_t i = 0; i < loader.train_windows(); ++i) starts.insert(loader.next().inputs[0]);
  EXPECT_EQ(static_cast<int64_t>(starts.size()), loader.train_windows());
  EXPECT_EQ(loader.epoch(), 1u);
}

TEST(Loader, SameSeedSameBatchesOtherSeedDiffers) {
  Fixture f;
  DataLoader a(f.opt), b(f.opt);
  f.opt.seed = 1235;
  DataLoader c(f.opt);
  bool differs = false;
  for (int i = 0; i < 10; ++i) {
    Batch x = a.next(), y = b.next(), z = c.next();
    EXPECT_EQ(x.inputs, y.inputs);
    differs |= x.inputs != z.inputs;
  }
  EXPECT_TRUE(differs);
}

TEST(Loader, SaveRestoreContinuesExactly) {
  Fixture f;
  // 20 batches of 4 cross the epoch boundary (94 windows), so the restore must too.
  std::vector<Batch> straight;
  {
    DataLoader loader(f.opt);
    for (int i = 0; i < 30; ++i) straight.push_back(loader.next());
  }
  std::vector<Batch> resumed;
  nlohmann::json saved;
  {
    DataLoader loader(f.opt);
    for (int i = 0; i < 20; ++i) resumed.push_back(loader.next());
    saved = loader.state();
  }
  std::string text = saved.dump();
  DataLoader loader(f.opt);
  loader.restore(nlohmann::json::parse(text).get<LoaderState>());
  EXPECT_EQ(loader.epoch(), 0u);
  for (int i = 0; i < 10; ++i) resumed.push_back(loader.next());
  EXPECT_EQ(loader.epoch(), 1u);
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_EQ(resumed[i].inputs, straight[i].inputs) << "batch " << i;
    EXPECT_EQ(resumed[i].targets, straight[i].targets) << "batch " << i;
  }
}

TEST(Loader, RestoreRejectsChangedSeedOrData) {
  Fixture f;
  DataLoader loader(f.opt);
  loader.next();
  LoaderState s = loader.state();
  s.seed += 1;
  EXPECT_THROW(loader.restore(s), DataError);
  s = loader.state();
  s.windows += 1;
  try {
    loader.restore(s);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("training data or seq_len changed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nlohmann::json({{"seed", 1}}).get<LoaderState>(), DataError);
  EXPECT_THROW(nlohmann::json({{"seed", 1}, {"samples", -3}, {"windows", 2}, {"T", 4}}).get<LoaderState>(),
               DataError);
}

TEST(Loader, ValBatchesAreFixedAndSequential) {
  Fixture f;
  DataLoader loader(f.opt);
  EXPECT_EQ(loader.max_val_batches(), (299 / 16) / 4);
  std::vector<Batch> v1 = loader.val_batches(3);
  loader.next();
  std::vector<Batch> v2 = loader.val_batches(3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(v1[static_cast<size_t>(k)].inputs, v2[static_cast<size_t>(k)].inputs);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(v1[static_cast<size_t>(k)].inputs[static_cast<size_t>(r * 16)], 40000 + (k * 4 + r) * 16);
    }
  }
  EXPECT_THROW(loader.val_batches(loader.max_val_batches() + 1), DataError);
}

TEST(Loader, ShortShardIsAClearError) {
  Fixture f;
  f.opt.train[0].paths.push_back(make_shard(f.dir.path, "tiny.bin", 16, 0));
  try {
    DataLoader loader(f.opt);
    FAIL() << "no error";
  } catch (const DataError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("tiny.bin has 16 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("seq_len + 1 = 17"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace precon::worker
