#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>

#include "worker/common/error.h"
#include "worker/data/indexed.h"

namespace precon::worker {

namespace {

constexpr size_t kFlushBytes = size_t{1} << 20;

// A temp file left by a crash keeps its mode through O_TRUNC: it goes first (as in write_file_atomic).
std::string cleared_temp(const std::string& path) {
  ::unlink(path.c_str());
  return path;
}

fs::path directory_of(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

void rename_into_place(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw IoError(errno_text("rename to", to, errno), errno);
}

// The ids a dtype holds (never negative: no tokenizer has one); the writer narrows to it after this check.
int64_t largest_id(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8: return 255;
    case TokenDType::int8: return 127;
    case TokenDType::int16: return 32767;
    case TokenDType::uint16: return 65535;
    default: return std::numeric_limits<int32_t>::max();
  }
}

template <typename T>
void append_as(std::vector<uint8_t>& out, std::span<const int32_t> tokens) {
  const size_t at = out.size();
  out.resize(at + tokens.size() * sizeof(T));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const T v = static_cast<T>(tokens[i]);
    std::memcpy(out.data() + at + i * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
void append_raw(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
void append_raw(std::vector<uint8_t>& out, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

TokenDType integer_dtype(TokenDType dtype, const std::string& prefix) {
  if (dtype == TokenDType::float32 || dtype == TokenDType::float64 || token_dtype_size(dtype) == 0)
    throw DataError("cannot write Megatron dataset " + prefix + " with dtype " + token_dtype_name(dtype) +
                    ": tokens need an integer dtype (uint16 or int32, see optimal_token_dtype)");
  return dtype;
}

}  // namespace

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size > 0 && vocab_size < 65500 ? TokenDType::uint16 : TokenDType::int32;
}

IndexedWriter::IndexedWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix),
      dtype_(integer_dtype(dtype, prefix)),
      item_(token_dtype_size(dtype)),
      bin_(cleared_temp(prefix + ".bin.tmp")) {}

IndexedWriter::~IndexedWriter() {
  if (finished_) return;
  ::unlink((prefix_ + ".bin.tmp").c_str());
  ::unlink((prefix_ + ".idx.tmp").c_str());
}

void IndexedWriter::add_document(std::span<const int32_t> tokens) {
  if (finished_) throw std::logic_error("IndexedWriter::add_document after finish() on " + prefix_);
  const std::string where = "cannot add document " + std::to_string(documents()) + " to Megatron dataset " + prefix_;
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw DataError(where + ": its " + std::to_string(tokens.size()) + " tokens exceed the format's int32 sequence size; split it");
  const int64_t hi = largest_id(dtype_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > hi)
      throw DataError(where + ": token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) + " does not fit " +
                      token_dtype_name(dtype_) + " (0.." + std::to_string(hi) +
                      "): write the dataset as int32 (optimal_token_dtype picks it for vocab_size >= 65500)");
  }
  switch (dtype_) {
    case TokenDType::uint8: append_as<uint8_t>(buffer_, tokens); break;
    case TokenDType::int8: append_as<int8_t>(buffer_, tokens); break;
    case TokenDType::int16: append_as<int16_t>(buffer_, tokens); break;
    case TokenDType::uint16: append_as<uint16_t>(buffer_, tokens); break;
    case TokenDType::int32: append_as<int32_t>(buffer_, tokens); break;
    default: append_as<int64_t>(buffer_, tokens); break;
  }
  // preprocess_data.py adds the sizes of a document's non-empty sentences and then one document
  // index entry: an empty document is an entry that repeats the previous one.
  if (!tokens.empty()) sizes_.push_back(static_cast<int32_t>(tokens.size()));
  document_index_.push_back(static_cast<int64_t>(sizes_.size()));
  tokens_ += static_cast<int64_t>(tokens.size());
  if (buffer_.size() >= kFlushBytes) flush();
}

void IndexedWriter::flush() {
  bin_.write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void IndexedWriter::finish() {
  if (finished_) throw std::logic_error("IndexedWriter::finish() called twice on " + prefix_);
  flush();
  bin_.finish();

  std::vector<uint8_t> idx;
  idx.reserve(static_cast<size_t>(kIndexedHeaderBytes) + sizes_.size() * 12 + document_index_.size() * 8);
  idx.insert(idx.end(), kIndexedMagic, kIndexedMagic + sizeof kIndexedMagic);
  append_raw(idx, kIndexedVersion);
  append_raw(idx, static_cast<uint8_t>(dtype_));
  append_raw(idx, static_cast<uint64_t>(sizes_.size()));
  append_raw(idx, static_cast<uint64_t>(document_index_.size()));
  append_raw(idx, sizes_);
  std::vector<int64_t> pointers(sizes_.size());
  int64_t at = 0;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    pointers[i] = at;
    at += sizes_[i] * item_;
  }
  append_raw(idx, pointers);
  append_raw(idx, document_index_);
  const std::string idx_tmp = cleared_temp(prefix_ + ".idx.tmp");
  FileWriter idx_writer(idx_tmp);
  idx_writer.write(idx.data(), idx.size());
  idx_writer.finish();

  // The .idx is what makes a prefix a dataset (is_indexed_prefix), so it goes first and comes
  // back last, each step durable before the next: a crash never pairs one run's .idx with
  // another's .bin.
  const fs::path dir = directory_of(prefix_);
  const std::string idx_path = prefix_ + ".idx";
  if (::unlink(idx_path.c_str()) == 0) {
    fsync_directory(dir);
  } else if (errno != ENOENT) {
    throw IoError(errno_text("remove", idx_path, errno), errno);
  }
  rename_into_place(prefix_ + ".bin.tmp", prefix_ + ".bin");
  fsync_directory(dir);
  rename_into_place(idx_tmp, idx_path);
  fsync_directory(dir);
  finished_ = true;
}

}  // namespace precon::worker
