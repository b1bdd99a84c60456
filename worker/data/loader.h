// A deterministic, resumable batch loader over a blend of datasets (llm.c token shards or
// Megatron indexed datasets, datasets.h).
//
// Each dataset's training stream is endless: epoch e visits every window of it once, in an order
// given by a Fisher–Yates shuffle seeded from (the dataset's seed, e). Sample i of the loader is
// drawn from dataset d with probability weight_d / Σ weight, the draw a pure function of (seed, i),
// and it is the next sample of d's stream. Batch i holds loader samples [i*B, i*B + B). So the
// batches depend only on (seed, position), and the loader state is the number of samples handed
// out overall and per dataset. With one dataset every sample is its own (no draw).
//
// Validation is fixed: val sample k is drawn the same way from a fixed seed, and the k-th sample a
// val dataset gives is its window k in file order; val batch k row r is val sample k*B + r.
// Thread-safety: one DataLoader per thread; val_batches() is const and safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/config/config.h"
#include "worker/data/shard.h"

namespace precon::worker {

// One dataset of a blend: llm.c shards (one or more, in order) or one Megatron prefix.
struct DatasetSpec {
  DatasetSpec() = default;
  explicit DatasetSpec(std::vector<fs::path> p, double w = 1.0, std::string n = "")
      : paths(std::move(p)), weight(w), name(std::move(n)) {}
  std::vector<fs::path> paths;
  double weight = 1.0;  // > 0; relative to the blend's other weights
  std::string name;     // in messages and per-dataset metrics; "" = its first path's file name
};

// [data] train or val as the loader's datasets: each source's comma-separated paths split.
std::vector<DatasetSpec> dataset_specs(const std::vector<DataSource>& sources);

struct LoaderOptions {
  std::vector<DatasetSpec> train;  // at least one
  std::vector<DatasetSpec> val;    // empty means no val_batches()
  std::string format = "auto";     // data.format: "auto" (by magic) | "llmc" | "megatron"
  bool shuffle_documents = true;   // data.document_boundaries = "shuffle" (Megatron's) or "eod"
  int64_t B = 0;                // sequences per batch
  int64_t T = 0;                // tokens per sequence
  uint64_t seed = 0;            // sampling seed (train.seed)
  int64_t vocab_size = 0;       // > 0: tokens >= vocab_size are an error naming the position
};

struct Batch {
  int64_t B = 0;
  int64_t T = 0;
  std::vector<int32_t> inputs;   // (B, T) row-major
  std::vector<int32_t> targets;  // (B, T): inputs shifted left by one token
};

// One training dataset's position.
struct DatasetState {
  std::string name;
  uint64_t samples = 0;  // its samples handed out so far
  int64_t windows = 0;   // its windows per epoch at save time: detects changed data
};

// Everything needed to continue the training stream exactly. Saved in trainer.json.
struct LoaderState {
  uint64_t seed = 0;     // must match the loader's seed on restore
  uint64_t samples = 0;  // sequences handed out so far: the position in the stream
  int64_t windows = 0;   // training windows at save time (all datasets): detects changed shards
  int64_t T = 0;         // seq_len at save time
  std::vector<DatasetState> datasets;  // per training dataset, in blend order
};

// JSON form: {"seed", "samples", "epoch" (informational), "windows", "T", "datasets": [{"name",
// "samples", "windows"}]}; "datasets" may be absent (a one-dataset checkpoint from before blends).
// from_json throws DataError naming a missing or mistyped key.
void to_json(nlohmann::json& j, const LoaderState& state);
void from_json(const nlohmann::json& j, LoaderState& state);

class DataLoader {
 public:
  // Opens (maps) and validates every dataset. Throws DataError when one holds fewer than T + 1
  // tokens (a shard: each), B or T is not positive, a weight is not positive, or no training
  // dataset is given.
  explicit DataLoader(const LoaderOptions& options);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  Batch next();
  void next(Batch& out);  // reuses out's storage

  LoaderState state() const;
  // Continues from `state`. Throws DataError when it was taken with another seed, seq_len,
  // blend or set of training windows (the data changed).
  void restore(const LoaderState& state);

  uint64_t epoch() const;  // the first dataset's full passes started so far, 0-based
  int64_t train_windows() const { return train_windows_; }
  // Per training dataset, in blend order: its name and the tokens of the samples it has given.
  std::vector<std::pair<std::string, int64_t>> tokens_seen() const;
  int64_t val_windows() const { return val_windows_; }
  int64_t max_val_batches() const { return val_windows_ / B_; }

  // The first n validation batches; throws DataError when the val data hold fewer.
  std::vector<Batch> val_batches(int64_t n) const;

 private:
  struct Stream;  // one dataset and its position

  void fill_row(Stream& s, Batch& out, int64_t row);

  int64_t B_ = 0;
  int64_t T_ = 0;
  uint64_t seed_ = 0;
  uint64_t samples_ = 0;
  int64_t train_windows_ = 0;
  int64_t val_windows_ = 0;
  bool shuffle_documents_ = true;
  std::vector<std::unique_ptr<Stream>> train_;
  std::vector<std::unique_ptr<Stream>> val_;
  std::vector<double> train_cumulative_, val_cumulative_;  // normalised cumulative weights
  std::vector<int32_t> row_;                                // T + 1 tokens
};

}  // namespace precon::worker
