// Optimizer state written as parts of tensors (train/optimizer_shards.h) and read back into other
// parts: the values land where the whole matrix, filled by hand, says they belong, whatever the
// cut; and a checkpoint whose parts leave a hole, overlap, lie outside their tensor or belong to
// another shape is refused with a message that names the state.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/train/optimizer_files.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
namespace k = kernels;
using nlohmann::json;

constexpr int64_t kRows = 4, kCols = 6;

// value(i, j) of the whole 4 × 6 "w.momentum": distinct, so a misplaced value shows.
float value(int64_t i, int64_t j) { return static_cast<float>(10 * i + j + 1); }

// An optimizer that only lists the state it is given (the reader's view of an optimizer).
class Holder final : public Optimizer {
 public:
  std::vector<NamedState> states;
  void step(const StepContext&) override {}
  std::vector<NamedState> state_tensors() override { return states; }
  std::vector<StateKind> state_kinds() const override { return {}; }
  nlohmann::json state_scalars() const override { return json::object(); }
  void load_state_scalars(const nlohmann::json&) override {}
  PhaseSeconds phase_seconds() const override { return {}; }
  std::string routing_summary() const override { return ""; }
};

// A part of w.momentum over `memory` (rows × cols at the given leading dim), at (r0, c0).
NamedState part(float* memory, int64_t rows, int64_t cols, int64_t ld, int64_t r0, int64_t c0) {
  NamedState s;
  s.name = "w.momentum";
  s.param = "w";
  s.kind = "momentum";
  s.tensor = k::Tensor::view(memory, {rows, ld}).narrow(1, 0, cols);
  s.global_shape = {kRows, kCols};
  s.global_offset = {r0, c0};
  return s;
}

class OptimizerShards : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon-optshards-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes each holder's primary state as rank r of holders.size() and the index over them.
  void save(std::vector<Holder*> holders) {
    std::vector<FileListing> listings;
    const int ranks = static_cast<int>(holders.size());
    for (int r = 0; r < ranks; ++r) {
      OptimizerFile shard = optimizer_file(*holders[static_cast<size_t>(r)]);
      write_safetensors(dir_ / optimizer_file_name(r, ranks), shard.entries, shard.metadata);
      listings.push_back({optimizer_file_name(r, ranks), shard.entries, shard.metadata});
    }
    write_index(optimizer_index(listings));
  }
  void write_index(const json& index) { std::ofstream(dir_ / "optimizer.json") << index.dump(1); }
  json index() {
    std::ifstream in(dir_ / "optimizer.json");
    return json::parse(in);
  }
  // Loads into a holder of the whole matrix and returns its values.
  std::vector<float> load_whole() {
    std::vector<float> whole(kRows * kCols, -1.0f);
    Holder h;
    h.states.push_back(part(whole.data(), kRows, kCols, kCols, 0, 0));
    load_optimizer_files(dir_, h, nullptr);
    return whole;
  }
  // The CheckpointError a load into `h` throws ("no error" when it loads), or into the whole matrix.
  std::string load_error(Holder* h = nullptr) {
    try {
      if (h) load_optimizer_files(dir_, *h, nullptr);
      else load_whole();
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

// Two ranks, each holding three column parts (Q/K/V-like chunks of 1 column) packed in its own
// 4 × 3 shard: rank r holds columns {r, 2 + r, 4 + r}, as tensor parallelism cuts a fused QKV.
struct ColumnShards {
  std::vector<float> memory[2];
  Holder ranks[2];
  ColumnShards() {
    for (int r = 0; r < 2; ++r) {
      memory[r].assign(kRows * 3, 0.0f);
      for (int64_t kc = 0; kc < 3; ++kc) {
        const int64_t col = 2 * kc + r;
        for (int64_t i = 0; i < kRows; ++i) memory[r][static_cast<size_t>(i * 3 + kc)] = value(i, col);
        ranks[r].states.push_back(part(memory[r].data() + kc, kRows, 1, 3, 0, col));
      }
    }
  }
};

TEST_F(OptimizerShards, StridedColumnPartsOfTwoRanksReadBackAsTheWholeMatrix) {
  ColumnShards shards;
  save({&shards.ranks[0], &shards.ranks[1]});
  const json entries = index()["entries"];
  ASSERT_EQ(entries.size(), 6u);
  for (const json& e : entries) {
    EXPECT_EQ(e["name"], "w.momentum") << e;
    EXPECT_EQ(e["global_shape"], json({kRows, kCols})) << e;
    EXPECT_EQ(e["shape"], json({kRows, 1})) << e;
    EXPECT_EQ(e["key"], "w.momentum@0," + std::to_string(e["offset"][1].get<int>())) << e;
  }
  const std::vector<float> whole = load_whole();
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j) EXPECT_EQ(whole[static_cast<size_t>(i * kCols + j)], value(i, j)) << i << "," << j;
}

TEST_F(OptimizerShards, AWholeTensorReadsIntoPartsCutAnotherWay) {
  // Written whole by one rank, read back as two row halves and as strided column parts.
  std::vector<float> whole(kRows * kCols);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j) whole[static_cast<size_t>(i * kCols + j)] = value(i, j);
  Holder writer;
  writer.states.push_back(part(whole.data(), kRows, kCols, kCols, 0, 0));
  save({&writer});
  EXPECT_FALSE(index()["entries"][0].contains("key")) << "a whole tensor is stored under its name";

  std::vector<float> rows(kRows * kCols, -1.0f), cols(kRows * kCols, -1.0f);
  Holder by_rows, by_cols;
  by_rows.states.push_back(part(rows.data(), 2, kCols, kCols, 0, 0));
  by_rows.states.push_back(part(rows.data() + 2 * kCols, 2, kCols, kCols, 2, 0));
  by_cols.states.push_back(part(cols.data(), kRows, 4, kCols, 0, 0));      // columns 0..3
  by_cols.states.push_back(part(cols.data() + 4, kRows, 2, kCols, 0, 4));  // columns 4..5
  load_optimizer_files(dir_, by_rows, nullptr);
  load_optimizer_files(dir_, by_cols, nullptr);
  EXPECT_EQ(rows, whole);
  EXPECT_EQ(cols, whole);
}

TEST_F(OptimizerShards, AMissingPartIsAHoleAndIsRefused) {
  ColumnShards shards;
  save({&shards.ranks[0], &shards.ranks[1]});
  json idx = index();
  idx["entries"].erase(idx["entries"].begin() + 4);
  write_index(idx);
  const std::string error = load_error();
  EXPECT_NE(error.find("optimizer state w.momentum hold 20 values for the part [4, 6] at [0, 0]"), std::string::npos) << error;
  EXPECT_NE(error.find("parts missing or overlapping"), std::string::npos) << error;
}

TEST_F(OptimizerShards, OverlappingPartsAreRefused) {
  ColumnShards shards;
  save({&shards.ranks[0], &shards.ranks[1]});
  json idx = index();
  idx["entries"].push_back(idx["entries"][0]);
  write_index(idx);
  EXPECT_NE(load_error().find("hold 28 values"), std::string::npos) << load_error();
}

TEST_F(OptimizerShards, APartOutsideItsTensorOrWithAFractionalOffsetIsRefused) {
  ColumnShards shards;
  save({&shards.ranks[0], &shards.ranks[1]});
  json idx = index();
  idx["entries"][0]["offset"] = {0, 6};
  write_index(idx);
  EXPECT_NE(load_error().find("entry w.momentum: its part [4, 1] at [0, 6] does not lie inside its global shape [4, 6]"),
            std::string::npos) << load_error();
  idx["entries"][0]["offset"] = {0, 0.5};
  write_index(idx);
  EXPECT_NE(load_error().find("entry w.momentum offset holds 0.5, not an integer"), std::string::npos) << load_error();
}

TEST_F(OptimizerShards, AnotherGlobalShapeIsRefusedWithBothShapes) {
  ColumnShards shards;
  save({&shards.ranks[0], &shards.ranks[1]});
  std::vector<float> other(5 * kCols);
  Holder h;
  h.states.push_back(part(other.data(), 5, kCols, kCols, 0, 0));
  h.states[0].global_shape = {5, kCols};
  const std::string error = load_error(&h);
  EXPECT_NE(error.find("optimizer state w.momentum was saved with shape [4, 6], this optimizer's is [5, 6]"),
            std::string::npos) << error;
}

TEST_F(OptimizerShards, StateNoRankHoldsNowIsRefused) {
  // The checkpoint holds the whole matrix; a loader holding only the first row half would leave
  // the rest unread (two ranks are one here: no group).
  ColumnShards shards;
  save({&shards.ranks[0], &shards.ranks[1]});
  std::vector<float> half(2 * kCols);
  Holder h;
  h.states.push_back(part(half.data(), 2, kCols, kCols, 0, 0));
  const std::string error = load_error(&h);
  EXPECT_NE(error.find("holds 24 optimizer state values in 1 tensor(s), this optimizer's ranks write 12"), std::string::npos)
      << error;
  for (int64_t j = 0; j < kCols; ++j) EXPECT_EQ(half[static_cast<size_t>(kCols + j)], value(1, j));
}

}  // namespace
}  // namespace precon::worker
