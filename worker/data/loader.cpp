#include "worker/data/loader.h"

#include <algorithm>
#include <string>

#include "worker/common/error.h"

namespace precon::worker {

struct DataLoader::Source {
  std::vector<Shard> shards;
  std::vector<int64_t> first_window;  // prefix sums: shard s owns [first_window[s], first_window[s+1])
};

// splitmix64: a tiny, well-mixed generator whose output is the same on every platform
// (std::uniform_int_distribution is not), which resumable sampling needs.
static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, n) without modulo bias (rejection of the short top range).
static uint64_t bounded(uint64_t& x, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    uint64_t r = splitmix64(x);
    if (r < limit) return r % n;
  }
}

std::unique_ptr<DataLoader::Source> DataLoader::open_source(const std::vector<fs::path>& paths, int64_t T,
                                                            int64_t vocab_size, const char* split) {
  auto src = std::make_unique<DataLoader::Source>();
  src->first_window.push_back(0);
  for (const fs::path& p : paths) {
    Shard shard(p, vocab_size);
    if (shard.size() < T + 1) {
      throw DataError(std::string(split) + " shard " + p.string() + " has " + std::to_string(shard.size()) +
                      " tokens, fewer than seq_len + 1 = " + std::to_string(T + 1) +
                      " needed for one (input, target) window; use a shorter seq_len or more data");
    }
    src->first_window.push_back(src->first_window.back() + (shard.size() - 1) / T);
    src->shards.push_back(std::move(shard));
  }
  return src;
}

DataLoader::DataLoader(const LoaderOptions& options) : B_(options.B), T_(options.T), seed_(options.seed) {
  if (B_ <= 0 || T_ <= 0) {
    throw DataError("data loader needs positive batch_size and seq_len (got B=" + std::to_string(B_) +
                    ", T=" + std::to_string(T_) + ")");
  }
  if (options.train.empty()) throw DataError("data loader: no training shards given ([data] train)");
  train_ = open_source(options.train, T_, options.vocab_size, "train");
  val_ = open_source(options.val, T_, options.vocab_size, "val");
  train_windows_ = train_->first_window.back();
  val_windows_ = val_->first_window.back();
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

const std::vector<int64_t>& DataLoader::permutation(uint64_t epoch) {
  if (epoch == perm_epoch_) return perm_;
  perm_.resize(static_cast<size_t>(train_windows_));
  for (int64_t i = 0; i < train_windows_; ++i) perm_[static_cast<size_t>(i)] = i;
  // Mix seed and epoch through the generator so that neighbouring seeds/epochs decorrelate.
  uint64_t s = seed_;
  uint64_t state = splitmix64(s) ^ (epoch * 0xd1b54a32d192ed03ull);
  for (size_t i = perm_.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(bounded(state, i));
    std::swap(perm_[i - 1], perm_[j]);
  }
  perm_epoch_ = epoch;
  return perm_;
}

void DataLoader::fill_row(const Source& src, int64_t window, Batch& out, int64_t row) const {
  auto it = std::upper_bound(src.first_window.begin(), src.first_window.end(), window);
  const size_t s = static_cast<size_t>(it - src.first_window.begin()) - 1;
  const int64_t start = (window - src.first_window[s]) * T_;
  const uint16_t* tok = src.shards[s].tokens().data() + start;
  int32_t* in = out.inputs.data() + row * T_;
  int32_t* tg = out.targets.data() + row * T_;
  for (int64_t t = 0; t < T_; ++t) {
    in[t] = tok[t];
    tg[t] = tok[t + 1];
  }
}

static void shape_batch(Batch& out, int64_t B, int64_t T) {
  out.B = B;
  out.T = T;
  out.inputs.resize(static_cast<size_t>(B * T));
  out.targets.resize(static_cast<size_t>(B * T));
}

void DataLoader::next(Batch& out) {
  shape_batch(out, B_, T_);
  const uint64_t W = static_cast<uint64_t>(train_windows_);
  for (int64_t r = 0; r < B_; ++r, ++samples_) {
    const std::vector<int64_t>& perm = permutation(samples_ / W);
    fill_row(*train_, perm[static_cast<size_t>(samples_ % W)], out, r);
  }
}

Batch DataLoader::next() {
  Batch b;
  next(b);
  return b;
}

uint64_t DataLoader::epoch() const { return samples_ / static_cast<uint64_t>(train_windows_); }

LoaderState DataLoader::state() const { return LoaderState{seed_, samples_, train_windows_, T_}; }

void DataLoader::restore(const LoaderState& state) {
  if (state.seed != seed_) {
    throw DataError("cannot resume the data loader: the checkpoint used seed " + std::to_string(state.seed) +
                    ", this run uses " + std::to_string(seed_) + "; keep train.seed unchanged to resume");
  }
  if (state.T != T_ || state.windows != train_windows_) {
    throw DataError("cannot resume the data loader: the checkpoint saw " + std::to_string(state.windows) +
                    " training windows of seq_len " + std::to_string(state.T) + ", this run has " +
                    std::to_string(train_windows_) + " of seq_len " + std::to_string(T_) +
                    "; the training shards or seq_len changed since the checkpoint");
  }
  samples_ = state.samples;
}

std::vector<Batch> DataLoader::val_batches(int64_t n) const {
  if (n < 0 || n > max_val_batches()) {
    throw DataError("asked for " + std::to_string(n) + " validation batches but the val shards hold " +
                    std::to_string(val_windows_) + " windows of seq_len " + std::to_string(T_) + ", i.e. at most " +
                    std::to_string(max_val_batches()) + " batches of " + std::to_string(B_) +
                    "; lower train.eval_batches or add validation data");
  }
  std::vector<Batch> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    Batch& b = out[static_cast<size_t>(k)];
    shape_batch(b, B_, T_);
    for (int64_t r = 0; r < B_; ++r) fill_row(*val_, k * B_ + r, b, r);
  }
  return out;
}

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed},
                     {"samples", s.samples},
                     {"epoch", s.windows > 0 ? s.samples / static_cast<uint64_t>(s.windows) : 0},
                     {"windows", s.windows},
                     {"T", s.T}};
}

template <typename V>
static V get_key(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) {
    throw DataError(std::string("data loader state: missing key \"") + key + "\"");
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    throw DataError(std::string("data loader state: \"") + key + "\" must be a non-negative integer, got " +
                    v.dump());
  }
  return v.get<V>();
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  s.seed = get_key<uint64_t>(j, "seed");
  s.samples = get_key<uint64_t>(j, "samples");
  s.windows = get_key<int64_t>(j, "windows");
  s.T = get_key<int64_t>(j, "T");
}

}  // namespace precon::worker
