// One dataset of the loader's blend, in either on-disk format, as samples of T + 1 tokens.
//
// llm.c shards (format "llmc"): the windows are the non-overlapping spans [k*T, k*T + T + 1) of
// each shard; a window never crosses a shard boundary.
// Megatron indexed datasets (format "megatron", prefix.bin + prefix.idx): as Megatron's GPT
// dataset does, each epoch lays the documents (the index's sequences) end to end in an order
// shuffled from (seed, epoch), and the windows [k*T, k*T + T + 1) of that stream cross document
// boundaries. document_boundaries = "eod" keeps the file's document order instead (documents are
// then separated only by the EOD tokens the data holds). Validation always reads file order.
//
// Within an epoch the loader visits the windows in a shuffled order of its own (loader.cpp).
// Thread-safety: one TokenDataset per loader; fill() caches the epoch's document order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

// splitmix64: a tiny, well-mixed generator whose output is the same on every platform
// (std::uniform_int_distribution is not), which resumable sampling needs.
uint64_t splitmix64(uint64_t& x);
// Uniform in [0, n) without modulo bias.
uint64_t bounded(uint64_t& x, uint64_t n);
// The Fisher–Yates permutation of [0, n) for (seed, epoch, salt); salt 0 is the loader's window order.
void shuffled(std::vector<int64_t>& out, int64_t n, uint64_t seed, uint64_t epoch, uint64_t salt);

enum class DataFormat { automatic, llmc, megatron };

// "llmc" for an llm.c shard list, "megatron" for a prefix whose .idx has Megatron's magic;
// throws DataError naming the path when it is neither.
DataFormat detect_format(const std::vector<fs::path>& paths);

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  int64_t windows() const { return windows_; }  // samples of T + 1 tokens per epoch
  int64_t tokens() const { return tokens_; }    // tokens in the dataset
  // Window `window` of epoch `epoch` into out[0, T]. shuffle_documents: the epoch's document order
  // (training) or file order (validation, "eod").
  virtual void fill(uint64_t epoch, int64_t window, bool shuffle_documents, int32_t* out) = 0;

 protected:
  int64_t windows_ = 0;
  int64_t tokens_ = 0;
};

struct DatasetOpen {
  std::vector<fs::path> paths;  // llm.c shards, or one Megatron prefix
  DataFormat format = DataFormat::automatic;
  int64_t T = 0;
  int64_t vocab_size = 0;  // > 0: every token is checked against it
  uint64_t seed = 0;       // the document order's seed
  const char* split = "train";
};

// Opens and validates one dataset. Throws DataError naming the file when it holds fewer than
// T + 1 tokens, is malformed, or holds a token >= vocab_size.
std::unique_ptr<TokenDataset> open_dataset(const DatasetOpen& open);

}  // namespace precon::worker
