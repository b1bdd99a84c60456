#include "worker/data/indexed.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "worker/common/error.h"
#include "worker/data/prepare.h"

namespace precon::worker {

static_assert(std::endian::native == std::endian::little, "Megatron's files are little-endian, as is every host we target");

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8: return "uint8";
    case TokenDType::int8: return "int8";
    case TokenDType::int16: return "int16";
    case TokenDType::int32: return "int32";
    case TokenDType::int64: return "int64";
    case TokenDType::float64: return "float64";
    case TokenDType::float32: return "float32";
    case TokenDType::uint16: return "uint16";
  }
  return "unknown";
}

int64_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8:
    case TokenDType::int8: return 1;
    case TokenDType::int16:
    case TokenDType::uint16: return 2;
    case TokenDType::int32:
    case TokenDType::float32: return 4;
    case TokenDType::int64:
    case TokenDType::float64: return 8;
  }
  return 0;
}

namespace {

template <typename T>
T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

MappedFile open_part(const std::string& prefix, const char* extension) {
  const std::string path = prefix + extension;
  try {
    return MappedFile(path);
  } catch (const IoError& e) {
    if (e.sys_errno() == ENOENT)
      throw DataError("Megatron dataset " + prefix + ": " + path + " does not exist (a prefix names prefix.idx and prefix.bin: give the path without the extension)");
    throw DataError("Megatron dataset " + prefix + ": cannot read " + path + ": " + e.what());
  }
}

// Invokes fn with a typed pointer to the first token of `at`; the mapping is page-aligned and
// every pointer a multiple of the item size (checked at open), so the access is aligned.
template <typename Fn>
decltype(auto) with_tokens(TokenDType dtype, const std::byte* at, Fn&& fn) {
  switch (dtype) {
    case TokenDType::uint8: return fn(reinterpret_cast<const uint8_t*>(at));
    case TokenDType::int8: return fn(reinterpret_cast<const int8_t*>(at));
    case TokenDType::int16: return fn(reinterpret_cast<const int16_t*>(at));
    case TokenDType::uint16: return fn(reinterpret_cast<const uint16_t*>(at));
    case TokenDType::int32: return fn(reinterpret_cast<const int32_t*>(at));
    default: return fn(reinterpret_cast<const int64_t*>(at));
  }
}

}  // namespace

IndexedDataset::IndexedDataset(const std::string& prefix, int64_t vocab_size)
    : prefix_(prefix), idx_(open_part(prefix, ".idx")), bin_(open_part(prefix, ".bin")) {
  const std::string idx_name = prefix + ".idx", bin_name = prefix + ".bin";
  const std::byte* idx = idx_.bytes().data();
  const uint64_t idx_size = idx_.size();
  if (idx_size < sizeof kIndexedMagic || std::memcmp(idx, kIndexedMagic, sizeof kIndexedMagic) != 0) {
    throw DataError(idx_name + " is not a Megatron indexed-dataset index (it does not start with the magic MMIDIDX\\0\\0" +
                    (idx_size < sizeof kIndexedMagic ? "; it has only " + std::to_string(idx_size) + " bytes" : std::string()) +
                    "): was it written by another tool, or is it empty or truncated?");
  }
  if (idx_size < kIndexedHeaderBytes) {
    throw DataError("Megatron index " + idx_name + " is truncated inside its header (" + std::to_string(idx_size) +
                    " bytes, the header alone is " + std::to_string(kIndexedHeaderBytes) + ")");
  }
  const uint64_t version = load_le<uint64_t>(idx + 9);
  if (version != kIndexedVersion) {
    throw DataError("Megatron index " + idx_name + " has version " + std::to_string(version) + ", expected " +
                    std::to_string(kIndexedVersion) + " (the only version Megatron writes)");
  }
  const auto code = load_le<uint8_t>(idx + 17);
  dtype_ = static_cast<TokenDType>(code);
  item_ = token_dtype_size(dtype_);
  if (item_ == 0) {
    throw DataError("Megatron index " + idx_name + " has dtype code " + std::to_string(code) +
                    ", not one of Megatron's (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  }
  if (dtype_ == TokenDType::float32 || dtype_ == TokenDType::float64) {
    throw DataError("Megatron index " + idx_name + " has dtype code " + std::to_string(code) + " (" + token_dtype_name(dtype_) +
                    "): its values are not token ids; precon trains on integer datasets (uint8, int8, int16, uint16, int32, int64)");
  }

  // Each array is measured against what is left of the file before anything is multiplied, so
  // no count can overflow the arithmetic (4c > b exactly when c > b / 4).
  const uint64_t count = load_le<uint64_t>(idx + 18), doc_count = load_le<uint64_t>(idx + 26);
  const uint64_t body = idx_size - kIndexedHeaderBytes;
  const char* ends_inside = count > body / 4 ? "sizes"
                            : count > body / 12 ? "pointers"
                            : doc_count > (body - 12 * count) / 8 ? "document index"
                            : nullptr;
  if (ends_inside) {
    throw DataError("Megatron index " + idx_name + " is truncated: its header counts " + std::to_string(count) + " sequences and " +
                    std::to_string(doc_count) + " document index entries, more than its " + std::to_string(idx_size) +
                    " bytes hold (the file ends inside the " + ends_inside + ")");
  }
  const uint64_t expected = kIndexedHeaderBytes + 12 * count + 8 * doc_count;
  if (expected < idx_size) {
    const uint64_t extra = idx_size - expected;
    if (extra == count && count > 0)
      throw DataError("Megatron index " + idx_name + " has one byte per sequence after its document index: the sequence modes of "
                      "a multimodal dataset, which precon does not read (it trains on text datasets)");
    throw DataError("Megatron index " + idx_name + " has " + std::to_string(extra) + " bytes after its document index (" +
                    std::to_string(expected) + " bytes expected from its counts): is it damaged?");
  }
  if (doc_count == 0)
    throw DataError("Megatron index " + idx_name + " has an empty document index (it needs at least the leading 0)");
  sequences_ = static_cast<int64_t>(count);
  sizes_ = idx + kIndexedHeaderBytes;
  pointers_ = sizes_ + 4 * count;

  const auto bin_size = static_cast<int64_t>(bin_.size());
  int64_t end = 0;  // where the sequences so far end in .bin
  for (int64_t i = 0; i < sequences_; ++i) {
    const int32_t size = load_le<int32_t>(sizes_ + 4 * i);
    const int64_t at = pointer(i);
    if (size < 0) throw DataError("Megatron index " + idx_name + " gives sequence " + std::to_string(i) + " a negative size");
    if (at < 0 || at > bin_size || size * item_ > bin_size - at) {
      throw DataError("Megatron index " + idx_name + ": sequence " + std::to_string(i) + " (" + std::to_string(size) +
                      " tokens) runs past the end of " + bin_name + " (" + std::to_string(bin_size) +
                      " bytes): is the .bin truncated, or are the two files from different runs?");
    }
    if (at != end) {
      throw DataError("Megatron index " + idx_name + ": sequence " + std::to_string(i) + " does not start where sequence " +
                      std::to_string(i - 1) + " ends (byte " + std::to_string(end) + " of " + bin_name +
                      "): its pointers disagree with its sizes");
    }
    end = at + size * item_;
  }
  if (end != bin_size) {
    throw DataError(bin_name + " has " + std::to_string(bin_size - end) + " bytes after the last sequence that " + idx_name +
                    " describes (" + std::to_string(end) + " bytes): are the two files from different runs?");
  }
  total_tokens_ = end / item_;

  document_index_.resize(doc_count);
  std::memcpy(document_index_.data(), pointers_ + 8 * count, 8 * doc_count);
  for (size_t j = 0; j < document_index_.size(); ++j) {
    const int64_t first = j == 0 ? 0 : document_index_[j - 1];
    const bool last = j + 1 == document_index_.size();
    if (document_index_[j] < first || document_index_[j] > sequences_ || (j == 0 && document_index_[j] != 0) ||
        (last && document_index_[j] != sequences_)) {
      throw DataError("Megatron index " + idx_name + ": document index entry " + std::to_string(j) +
                      " breaks the rule that the entries run from 0 to the sequence count (" + std::to_string(sequences_) +
                      ") without decreasing");
    }
  }

  if (vocab_size > 0) {
    std::string bad = find_token_outside(vocab_size, 1);
    if (!bad.empty()) throw DataError(bad);
  }
}

int64_t IndexedDataset::pointer(int64_t i) const { return load_le<int64_t>(pointers_ + 8 * i); }

int64_t IndexedDataset::sequence_length(int64_t i) const {
  if (i < 0 || i >= sequences_)
    throw std::out_of_range("sequence " + std::to_string(i) + " of Megatron dataset " + prefix_ + ", which has " +
                            std::to_string(sequences_));
  return load_le<int32_t>(sizes_ + 4 * i);
}

int64_t IndexedDataset::token(int64_t k) const {
  return with_tokens(dtype_, bin_.bytes().data(), [k](const auto* t) { return static_cast<int64_t>(t[k]); });
}

std::string IndexedDataset::find_token_outside(int64_t vocab_size, int64_t stride) const {
  const int64_t bad = with_tokens(dtype_, bin_.bytes().data(), [&](const auto* t) -> int64_t {
    for (int64_t k = 0; k < total_tokens_; k += stride) {
      const int64_t v = t[k];
      if (v < 0 || v >= vocab_size) return k;
    }
    return -1;
  });
  if (bad < 0) return "";
  // The sequence holding the token: the last one starting at or before it (an empty sequence
  // shares its pointer with the next, which comes later).
  const int64_t byte = bad * item_;
  int64_t lo = 0, hi = sequences_ - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (pointer(mid) <= byte) lo = mid; else hi = mid - 1;
  }
  const int64_t value = token(bad);
  return "Megatron dataset " + prefix_ + ".bin has token " + std::to_string(value) + " in sequence " + std::to_string(lo) +
         " at position " + std::to_string((byte - pointer(lo)) / item_) + " (token " + std::to_string(bad) + " of the file), " +
         (value < 0 ? "a negative id" : "outside the model's vocab_size " + std::to_string(vocab_size)) +
         ": was it tokenized with a different tokenizer?";
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t n, int32_t* out) const {
  const int64_t length = sequence_length(seq);
  if (offset < 0 || n < 0 || offset > length || n > length - offset) {
    throw std::out_of_range("tokens [" + std::to_string(offset) + ", +" + std::to_string(n) + ") of sequence " +
                            std::to_string(seq) + " of Megatron dataset " + prefix_ + ", which has " + std::to_string(length));
  }
  if (n == 0) return;
  const std::byte* at = bin_.bytes().data() + pointer(seq) + offset * item_;
  with_tokens(dtype_, at, [&](const auto* t) {
    using T = std::remove_cvref_t<decltype(*t)>;
    if constexpr (std::is_same_v<T, int32_t>) {
      std::memcpy(out, t, static_cast<size_t>(n) * sizeof(int32_t));
    } else if constexpr (std::is_same_v<T, int64_t>) {
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] < std::numeric_limits<int32_t>::min() || t[i] > std::numeric_limits<int32_t>::max())
          throw DataError("Megatron dataset " + prefix_ + ".bin has a token outside int32 in sequence " + std::to_string(seq) +
                          " at position " + std::to_string(offset + i) + ": open it with the model's vocab_size to find every such token");
        out[i] = static_cast<int32_t>(t[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = t[i];
    }
  });
}

std::string check_indexed_dataset(const std::string& prefix, int64_t seq_len, int64_t vocab_size) {
  try {
    const IndexedDataset data(prefix);
    if (data.total_tokens() < seq_len + 1)
      return "Megatron dataset " + prefix + " has " + std::to_string(data.total_tokens()) + " tokens, fewer than seq_len + 1 = " +
             std::to_string(seq_len + 1) + " needed for one (input, target) window";
    if (vocab_size <= 0) return "";
    return data.find_token_outside(vocab_size, std::max<int64_t>(1, data.total_tokens() / kTokenSample));
  } catch (const WorkerError& e) {
    return e.what();
  }
}

bool is_indexed_prefix(const std::string& prefix) {
  try {
    std::ifstream in(prefix + ".idx", std::ios::binary);
    char magic[sizeof kIndexedMagic];
    return in.read(magic, sizeof magic) && std::memcmp(magic, kIndexedMagic, sizeof magic) == 0;
  } catch (...) {
    return false;
  }
}

}  // namespace precon::worker
