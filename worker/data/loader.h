// A deterministic, resumable batch loader over llm.c token shards.
//
// Training windows are the non-overlapping spans [k*T, k*T + T + 1) of each shard (a window
// never crosses a shard boundary). The training stream is an endless sequence of windows:
// epoch e visits every window once in an order given by a Fisher–Yates shuffle seeded from
// (seed, e). Batch i holds stream samples [i*B, i*B + B). So the batches depend only on
// (seed, position), and the loader state is just the number of samples handed out.
//
// Validation is fixed: val batch k row r is window k*B + r of the val shards in order, the
// same every call.
// Thread-safety: one DataLoader per thread; val_batches() is const and safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/data/shard.h"

namespace precon::worker {

struct LoaderOptions {
  std::vector<fs::path> train;  // training shards, in order; at least one
  std::vector<fs::path> val;    // validation shards; empty means no val_batches()
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

// Everything needed to continue the training stream exactly. Saved in trainer.json.
struct LoaderState {
  uint64_t seed = 0;     // must match the loader's seed on restore
  uint64_t samples = 0;  // sequences handed out so far: the position in the stream
  int64_t windows = 0;   // training windows at save time: detects changed shards
  int64_t T = 0;         // seq_len at save time
};

// JSON form: {"seed", "samples", "epoch" (informational), "windows", "T"}. from_json
// throws DataError naming a missing or mistyped key.
void to_json(nlohmann::json& j, const LoaderState& state);
void from_json(const nlohmann::json& j, LoaderState& state);

class DataLoader {
 public:
  // Opens (maps) and validates every shard. Throws DataError when a shard is shorter than
  // T + 1 tokens, B or T is not positive, or no training shard is given.
  explicit DataLoader(const LoaderOptions& options);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  Batch next();
  void next(Batch& out);  // reuses out's storage

  LoaderState state() const;
  // Continues from `state`. Throws DataError when it was taken with another seed, seq_len
  // or set of training windows (the shards changed).
  void restore(const LoaderState& state);

  uint64_t epoch() const;  // full passes over the training windows started so far, 0-based
  int64_t train_windows() const { return train_windows_; }
  int64_t val_windows() const { return val_windows_; }
  int64_t max_val_batches() const { return val_windows_ / B_; }

  // The first n validation batches; throws DataError when the val shards hold fewer.
  std::vector<Batch> val_batches(int64_t n) const;

 private:
  struct Source;  // the shards of one split and their window offsets

  static std::unique_ptr<Source> open_source(const std::vector<fs::path>& paths, int64_t T, int64_t vocab_size,
                                             const char* split);
  const std::vector<int64_t>& permutation(uint64_t epoch);
  void fill_row(const Source& src, int64_t window, Batch& out, int64_t row) const;

  int64_t B_ = 0;
  int64_t T_ = 0;
  uint64_t seed_ = 0;
  uint64_t samples_ = 0;
  int64_t train_windows_ = 0;
  int64_t val_windows_ = 0;
  std::unique_ptr<Source> train_;
  std::unique_ptr<Source> val_;
  std::vector<int64_t> perm_;  // window order of epoch perm_epoch_
  uint64_t perm_epoch_ = UINT64_MAX;
};

}  // namespace precon::worker
