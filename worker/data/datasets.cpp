#include "worker/data/datasets.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "worker/common/error.h"
#include "worker/data/indexed.h"
#include "worker/data/shard.h"

namespace precon::worker {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t bounded(uint64_t& x, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    uint64_t r = splitmix64(x);
    if (r < limit) return r % n;
  }
}

void shuffled(std::vector<int64_t>& out, int64_t n, uint64_t seed, uint64_t epoch, uint64_t salt) {
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  // Mix seed and epoch through the generator so that neighbouring seeds/epochs decorrelate.
  uint64_t s = seed ^ salt;
  uint64_t state = splitmix64(s) ^ (epoch * 0xd1b54a32d192ed03ull);
  for (size_t i = out.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(bounded(state, i));
    std::swap(out[i - 1], out[j]);
  }
}

DataFormat detect_format(const std::vector<fs::path>& paths) {
  if (paths.size() == 1 && is_indexed_prefix(paths[0].string())) return DataFormat::megatron;
  for (const fs::path& p : paths) {
    std::error_code ec;
    // A file is read as a shard (its header's checks say what is wrong); a prefix whose index is
    // missing or foreign is said so here.
    if (!fs::is_regular_file(p, ec) && (fs::exists(p.string() + ".idx", ec) || fs::exists(p.string() + ".bin", ec)))
      throw DataError(p.string() + " is not a file, and " + p.string() +
                      ".idx is missing or is not a Megatron index (MMIDIDX); a Megatron dataset needs both .bin and .idx");
  }
  return DataFormat::llmc;
}

namespace {

class LlmcDataset final : public TokenDataset {
 public:
  LlmcDataset(const DatasetOpen& o) : T_(o.T) {
    first_window_.push_back(0);
    for (const fs::path& p : o.paths) {
      Shard shard(p, o.vocab_size);
      if (shard.size() < T_ + 1) {
        throw DataError(std::string(o.split) + " shard " + p.string() + " has " + std::to_string(shard.size()) +
                        " tokens, fewer than seq_len + 1 = " + std::to_string(T_ + 1) +
                        " needed for one (input, target) window; use a shorter seq_len or more data");
      }
      first_window_.push_back(first_window_.back() + (shard.size() - 1) / T_);
      tokens_ += shard.size();
      shards_.push_back(std::move(shard));
    }
    windows_ = first_window_.back();
  }

  void fill(uint64_t, int64_t window, bool, int32_t* out) override {
    auto it = std::upper_bound(first_window_.begin(), first_window_.end(), window);
    const size_t s = static_cast<size_t>(it - first_window_.begin()) - 1;
    shards_[s].copy((window - first_window_[s]) * T_, T_ + 1, out);
  }

 private:
  int64_t T_;
  std::vector<Shard> shards_;
  std::vector<int64_t> first_window_;  // prefix sums: shard s owns [first_window[s], first_window[s+1])
};

// The document order's permutations use their own salt, apart from the loader's window order.
constexpr uint64_t kDocumentSalt = 0x6a09e667f3bcc908ull;

class MegatronDataset final : public TokenDataset {
 public:
  MegatronDataset(const DatasetOpen& o) : T_(o.T), seed_(o.seed), data_(o.paths[0].string(), o.vocab_size) {
    tokens_ = data_.total_tokens();
    if (tokens_ < T_ + 1) {
      throw DataError(std::string(o.split) + " dataset " + o.paths[0].string() + " has " + std::to_string(tokens_) +
                      " tokens in all, fewer than seq_len + 1 = " + std::to_string(T_ + 1) +
                      " needed for one (input, target) window; use a shorter seq_len or more data");
    }
    windows_ = (tokens_ - 1) / T_;
  }

  void fill(uint64_t epoch, int64_t window, bool shuffle_documents, int32_t* out) override {
    order(shuffle_documents ? epoch : UINT64_MAX);
    int64_t pos = window * T_;  // offset in the epoch's stream of documents
    int64_t need = T_ + 1;
    size_t d = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), pos) - start_.begin()) - 1;
    while (need > 0) {
      const int64_t seq = order_.empty() ? static_cast<int64_t>(d) : order_[d];
      const int64_t off = pos - start_[d];
      const int64_t n = std::min(need, data_.sequence_length(seq) - off);
      if (n > 0) data_.read(seq, off, n, out);
      out += n, need -= n, pos += n, ++d;
    }
  }

 private:
  // start_[i]: where the i-th document of the epoch's order begins in its stream. UINT64_MAX: file order.
  void order(uint64_t epoch) {
    if (epoch == order_epoch_ && !start_.empty()) return;
    const int64_t n = data_.sequences();
    if (epoch == UINT64_MAX) order_.clear();
    else shuffled(order_, n, seed_, epoch, kDocumentSalt);
    start_.assign(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < n; ++i)
      start_[static_cast<size_t>(i) + 1] =
          start_[static_cast<size_t>(i)] + data_.sequence_length(order_.empty() ? i : order_[static_cast<size_t>(i)]);
    order_epoch_ = epoch;
  }

  int64_t T_;
  uint64_t seed_;
  IndexedDataset data_;
  std::vector<int64_t> order_;  // the epoch's document order; empty: file order
  std::vector<int64_t> start_;
  uint64_t order_epoch_ = 0;
};

}  // namespace

std::unique_ptr<TokenDataset> open_dataset(const DatasetOpen& o) {
  if (o.paths.empty()) throw DataError(std::string("no ") + o.split + " data given");
  const DataFormat format = o.format == DataFormat::automatic ? detect_format(o.paths) : o.format;
  if (format == DataFormat::megatron) {
    if (o.paths.size() != 1)
      throw DataError("a Megatron dataset is named by one prefix, got " + std::to_string(o.paths.size()) +
                      " comma-separated paths; list several datasets as a blend [{path, weight}, ...]");
    return std::make_unique<MegatronDataset>(o);
  }
  return std::make_unique<LlmcDataset>(o);
}

}  // namespace precon::worker
