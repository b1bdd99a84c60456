#include "worker/data/loader.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "worker/common/error.h"
#include "worker/config/choice.h"
#include "worker/data/datasets.h"

namespace precon::worker {

struct DataLoader::Stream {
  std::unique_ptr<TokenDataset> data;
  std::string name;
  uint64_t seed = 0;          // its window order's and document order's seed
  uint64_t samples = 0;       // its samples handed out so far
  std::vector<int64_t> perm;  // window order of epoch perm_epoch
  uint64_t perm_epoch = UINT64_MAX;
};

namespace {

// Dataset d's seed: the loader's for the first, so that one dataset reads as it always has.
uint64_t dataset_seed(uint64_t seed, size_t d) {
  if (d == 0) return seed;
  uint64_t x = seed ^ (0x243f6a8885a308d3ull * d);
  return splitmix64(x);
}

constexpr uint64_t kBlendSalt = 0x13198a2e03707344ull;  // the draws' stream, apart from the orders
constexpr uint64_t kValSeed = 0x5eed;                   // validation draws do not move with train.seed

std::string dataset_name(const DatasetSpec& spec, size_t d) {
  if (!spec.name.empty()) return spec.name;
  return spec.paths.empty() ? "dataset" + std::to_string(d) : spec.paths[0].filename().string();
}

std::vector<double> cumulative_weights(const std::vector<DatasetSpec>& specs, const char* split) {
  double total = 0;
  for (size_t d = 0; d < specs.size(); ++d) {
    const DatasetSpec& s = specs[d];
    if (!(s.weight > 0) || !std::isfinite(s.weight))
      throw DataError(std::string("data.") + split + ": the weight of " + dataset_name(s, d) + " is " +
                      std::to_string(s.weight) + "; blend weights must be positive and finite");
    total += s.weight;
  }
  std::vector<double> out;
  double sum = 0;
  for (const DatasetSpec& s : specs) out.push_back((sum += s.weight) / total);
  if (!out.empty()) out.back() = 1.0;
  return out;
}

// Draw i of a blend: the dataset whose cumulative share first passes a uniform number from (seed, i).
size_t pick(const std::vector<double>& cumulative, uint64_t seed, uint64_t i) {
  if (cumulative.size() == 1) return 0;
  uint64_t x = (seed ^ kBlendSalt) + i * 0x9e3779b97f4a7c15ull;
  const double u = static_cast<double>(splitmix64(x) >> 11) * 0x1.0p-53;
  const size_t d = static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
  return std::min(d, cumulative.size() - 1);
}

void shape_batch(Batch& out, int64_t B, int64_t T) {
  out.B = B;
  out.T = T;
  out.inputs.resize(static_cast<size_t>(B * T));
  out.targets.resize(static_cast<size_t>(B * T));
}

void put_row(const std::vector<int32_t>& row, Batch& out, int64_t r) {
  std::copy(row.begin(), row.end() - 1, out.inputs.begin() + r * out.T);
  std::copy(row.begin() + 1, row.end(), out.targets.begin() + r * out.T);
}

}  // namespace

std::vector<DatasetSpec> dataset_specs(const std::vector<DataSource>& sources) {
  std::vector<DatasetSpec> out;
  for (const DataSource& src : sources) {
    DatasetSpec spec;
    spec.weight = src.weight;
    std::stringstream ss(src.path);
    for (std::string item; std::getline(ss, item, ',');) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) spec.paths.emplace_back(item);
    }
    if (!spec.paths.empty()) out.push_back(std::move(spec));
  }
  return out;
}

DataLoader::DataLoader(const LoaderOptions& options)
    : B_(options.B), T_(options.T), seed_(options.seed), shuffle_documents_(options.shuffle_documents) {
  if (B_ <= 0 || T_ <= 0) {
    throw DataError("data loader needs positive batch_size and seq_len (got B=" + std::to_string(B_) +
                    ", T=" + std::to_string(T_) + ")");
  }
  if (options.train.empty()) throw DataError("data loader: no training data given ([data] train)");
  constexpr Choice<DataFormat> kFormats[] = {
      {"auto", DataFormat::automatic}, {"llmc", DataFormat::llmc}, {"megatron", DataFormat::megatron}};
  const DataFormat format = parse_choice<DataError>("data.format", options.format, kFormats);
  train_cumulative_ = cumulative_weights(options.train, "train");
  val_cumulative_ = cumulative_weights(options.val, "val");
  auto open = [&](const std::vector<DatasetSpec>& specs, const char* split, std::vector<std::unique_ptr<Stream>>& out) {
    for (size_t d = 0; d < specs.size(); ++d) {
      auto s = std::make_unique<Stream>();
      s->name = dataset_name(specs[d], d);
      s->seed = dataset_seed(seed_, d);
      s->data = open_dataset({specs[d].paths, format, T_, options.vocab_size, s->seed, split});
      out.push_back(std::move(s));
    }
  };
  open(options.train, "train", train_);
  open(options.val, "val", val_);
  // Names are metric suffixes, one per dataset: file names that collide (early/train_text_document,
  // late/train_text_document) take their directory's name too, then the index.
  auto collides = [&](size_t d) {
    for (size_t e = 0; e < train_.size(); ++e)
      if (e != d && train_[e]->name == train_[d]->name) return true;
    return false;
  };
  std::vector<bool> renamed(train_.size(), false);
  for (size_t d = 0; d < train_.size(); ++d) renamed[d] = options.train[d].name.empty() && collides(d);
  for (size_t d = 0; d < train_.size(); ++d) {
    const fs::path& p = options.train[d].paths[0];
    if (renamed[d] && p.has_parent_path() && p.parent_path().has_filename())
      train_[d]->name = (p.parent_path().filename() / p.filename()).string();
  }
  for (size_t d = 0; d < train_.size(); ++d)
    if (collides(d)) {
      train_[d]->name += '_';  // appended apart: GCC 12 warns (-Wrestrict) on "_" + to_string
      train_[d]->name += std::to_string(d);
    }
  for (const auto& s : train_) train_windows_ += s->data->windows();
  // Validation samples drawn before some val dataset runs out of windows.
  if (val_.size() == 1) {
    val_windows_ = val_[0]->data->windows();
  } else if (!val_.empty()) {
    std::vector<int64_t> used(val_.size(), 0);
    for (;; ++val_windows_) {
      const size_t d = pick(val_cumulative_, kValSeed, static_cast<uint64_t>(val_windows_));
      if (++used[d] > val_[d]->data->windows()) break;
    }
  }
  row_.resize(static_cast<size_t>(T_ + 1));
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

void DataLoader::fill_row(Stream& s, Batch& out, int64_t row) {
  const uint64_t W = static_cast<uint64_t>(s.data->windows());
  const uint64_t epoch = s.samples / W;
  if (epoch != s.perm_epoch) {
    shuffled(s.perm, s.data->windows(), s.seed, epoch, 0);
    s.perm_epoch = epoch;
  }
  s.data->fill(epoch, s.perm[static_cast<size_t>(s.samples % W)], shuffle_documents_, row_.data());
  ++s.samples;
  put_row(row_, out, row);
}

void DataLoader::next(Batch& out) {
  shape_batch(out, B_, T_);
  for (int64_t r = 0; r < B_; ++r, ++samples_) fill_row(*train_[pick(train_cumulative_, seed_, samples_)], out, r);
}

Batch DataLoader::next() {
  Batch b;
  next(b);
  return b;
}

uint64_t DataLoader::epoch() const { return train_[0]->samples / static_cast<uint64_t>(train_[0]->data->windows()); }

std::vector<std::pair<std::string, int64_t>> DataLoader::tokens_seen() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& s : train_) out.emplace_back(s->name, static_cast<int64_t>(s->samples) * T_);
  return out;
}

LoaderState DataLoader::state() const {
  LoaderState st{seed_, samples_, train_windows_, T_, {}};
  for (const auto& s : train_) st.datasets.push_back({s->name, s->samples, s->data->windows()});
  return st;
}

void DataLoader::restore(const LoaderState& state) {
  if (state.seed != seed_) {
    throw DataError("cannot resume the data loader: the checkpoint used seed " + std::to_string(state.seed) +
                    ", this run uses " + std::to_string(seed_) + "; keep train.seed unchanged to resume");
  }
  if (state.T != T_ || state.windows != train_windows_) {
    throw DataError("cannot resume the data loader: the checkpoint saw " + std::to_string(state.windows) +
                    " training windows of seq_len " + std::to_string(state.T) + ", this run has " +
                    std::to_string(train_windows_) + " of seq_len " + std::to_string(T_) +
                    "; the training data or seq_len changed since the checkpoint");
  }
  std::vector<DatasetState> datasets = state.datasets;
  if (datasets.empty() && train_.size() == 1)  // a checkpoint from before blends
    datasets.push_back({train_[0]->name, state.samples, train_windows_});
  if (datasets.size() != train_.size()) {
    throw DataError("cannot resume the data loader: the checkpoint's blend has " + std::to_string(datasets.size()) +
                    " training datasets, this run's " + std::to_string(train_.size()) +
                    "; data.train changed since the checkpoint");
  }
  uint64_t total = 0;
  for (size_t d = 0; d < train_.size(); ++d) {
    if (datasets[d].windows != train_[d]->data->windows()) {
      throw DataError("cannot resume the data loader: training dataset " + std::to_string(d) + " (" + train_[d]->name +
                      ") had " + std::to_string(datasets[d].windows) + " windows at the checkpoint, now " +
                      std::to_string(train_[d]->data->windows()) + "; the data changed since the checkpoint");
    }
    total += datasets[d].samples;
  }
  if (total != state.samples) {
    throw DataError("cannot resume the data loader: the checkpoint's per-dataset samples add up to " +
                    std::to_string(total) + ", not its " + std::to_string(state.samples) + " samples");
  }
  samples_ = state.samples;
  for (size_t d = 0; d < train_.size(); ++d) train_[d]->samples = datasets[d].samples;
}

std::vector<Batch> DataLoader::val_batches(int64_t n) const {
  if (n < 0 || n > max_val_batches()) {
    throw DataError("asked for " + std::to_string(n) + " validation batches but the val data hold " +
                    std::to_string(val_windows_) + " windows of seq_len " + std::to_string(T_) + ", i.e. at most " +
                    std::to_string(max_val_batches()) + " batches of " + std::to_string(B_) +
                    "; lower train.eval_batches or add validation data");
  }
  std::vector<Batch> out(static_cast<size_t>(n));
  std::vector<int64_t> next_window(val_.size(), 0);
  std::vector<int32_t> row(static_cast<size_t>(T_ + 1));
  for (int64_t k = 0; k < n; ++k) {
    Batch& b = out[static_cast<size_t>(k)];
    shape_batch(b, B_, T_);
    for (int64_t r = 0; r < B_; ++r) {
      const size_t d = pick(val_cumulative_, kValSeed, static_cast<uint64_t>(k * B_ + r));
      val_[d]->data->fill(0, next_window[d]++, false, row.data());
      put_row(row, b, r);
    }
  }
  return out;
}

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed},
                     {"samples", s.samples},
                     {"epoch", s.windows > 0 ? s.samples / static_cast<uint64_t>(s.windows) : 0},
                     {"windows", s.windows},
                     {"T", s.T},
                     {"datasets", nlohmann::json::array()}};
  for (const DatasetState& d : s.datasets)
    j["datasets"].push_back({{"name", d.name}, {"samples", d.samples}, {"windows", d.windows}});
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
  s.datasets.clear();
  if (!j.contains("datasets")) return;
  if (!j.at("datasets").is_array()) throw DataError("data loader state: \"datasets\" must be an array");
  for (const nlohmann::json& d : j.at("datasets")) {
    DatasetState ds;
    if (!d.is_object() || !d.contains("name") || !d.at("name").is_string())
      throw DataError("data loader state: each of \"datasets\" needs a string \"name\"");
    ds.name = d.at("name").get<std::string>();
    ds.samples = get_key<uint64_t>(d, "samples");
    ds.windows = get_key<int64_t>(d, "windows");
    s.datasets.push_back(std::move(ds));
  }
}

}  // namespace precon::worker
