#include "worker/data/shard.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "worker/common/error.h"

namespace precon::worker {

// The format is little-endian on disk; every machine we target is too, so a static check
// is cheaper than byte swapping on every read.
static_assert(std::endian::native == std::endian::little, "token shards assume a little-endian host");

template <typename Token>
static void write_kind(const fs::path& path, std::span<const Token> tokens, int32_t magic, int32_t version) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw DataError("cannot write shard " + path.string() + ": " + std::to_string(tokens.size()) +
                    " tokens exceed the format's int32 token count; split the data into several shards");
  }
  std::vector<uint8_t> bytes(kShardHeaderBytes + tokens.size_bytes(), 0);
  int32_t header[kShardHeaderInts] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, kShardHeaderBytes);
  if (!tokens.empty()) std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), tokens.size_bytes());
  write_file_atomic(path, bytes);
}

void write_shard(const fs::path& path, std::span<const uint16_t> tokens) {
  write_kind(path, tokens, kShardMagic, kShardVersion);
}

void write_shard(const fs::path& path, std::span<const uint32_t> tokens) {
  write_kind(path, tokens, kShardMagic32, kShardVersion32);
}

ShardHeader parse_shard_header(std::span<const std::byte> bytes, const fs::path& path) {
  const std::string name = path.string();
  if (bytes.size() < kShardHeaderBytes) {
    throw DataError("token shard " + name + " is too short for its header (" + std::to_string(bytes.size()) +
                    " bytes, the header alone is " + std::to_string(kShardHeaderBytes) +
                    "): is it empty or truncated?");
  }
  int32_t h[3];
  std::memcpy(h, bytes.data(), sizeof h);
  if (h[0] != kShardMagic && h[0] != kShardMagic32) {
    // The file's bytes are not quoted: the message reaches logs that others may read, and a
    // recipe can name any file (/etc/passwd).
    throw DataError(name + " is not a precon/llm.c token shard (its header does not start with the magic " +
                    std::to_string(kShardMagic) + " or " + std::to_string(kShardMagic32) +
                    "): was it written by a different tool?");
  }
  const bool wide = h[0] == kShardMagic32;
  const int32_t version = wide ? kShardVersion32 : kShardVersion;
  if (h[1] != version) {
    throw DataError("token shard " + name + " has version " + std::to_string(h[1]) + ", expected " +
                    std::to_string(version) + (wide ? " (uint32 tokens)" : " (uint16 tokens)") +
                    " for its magic; re-create it with precon data prepare");
  }
  if (h[2] < 0) {
    throw DataError("token shard " + name + " has a negative token count (" + std::to_string(h[2]) + ")");
  }
  const int token_bytes = wide ? 4 : 2;
  const uint64_t expected = static_cast<uint64_t>(h[2]) * static_cast<uint64_t>(token_bytes);
  const uint64_t found = bytes.size() - kShardHeaderBytes;
  if (found != expected) {
    throw DataError("token shard " + name + (found < expected ? " is truncated" : " has trailing bytes") +
                    ": header says " + std::to_string(h[2]) + " tokens (" + std::to_string(expected) +
                    " bytes), found " + std::to_string(found) + " bytes after the header");
  }
  return ShardHeader{h[0], h[1], h[2], token_bytes};
}

static void check_vocab(const Shard& shard, int64_t vocab_size) {
  if (vocab_size <= 0) return;
  const uint32_t limit = static_cast<uint32_t>(std::min<int64_t>(vocab_size, UINT32_MAX));
  for (int64_t i = 0; i < shard.size(); ++i) {
    if (shard.at(i) >= limit) {
      throw DataError("token shard " + shard.path().string() + " has token " + std::to_string(shard.at(i)) +
                      " at position " + std::to_string(i) + ", outside the model's vocab_size " +
                      std::to_string(vocab_size) + ": was it prepared with a different tokenizer?");
    }
  }
}

// The whole-file path, apart from the mapped Shard's: the two agree (tests/fuzz/fuzz_shard.cpp).
static std::vector<int32_t> read_tokens(const fs::path& path, int64_t vocab_size, int* token_bytes) {
  const std::vector<uint8_t> bytes = read_file(path);
  const ShardHeader h = parse_shard_header(std::as_bytes(std::span(bytes)), path);
  *token_bytes = h.token_bytes;
  std::vector<int32_t> tokens(static_cast<size_t>(h.num_tokens));
  const uint8_t* body = bytes.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t t = 0;
    if (h.token_bytes == 2) {
      uint16_t v;
      std::memcpy(&v, body + 2 * i, 2);
      t = v;
    } else {
      std::memcpy(&t, body + 4 * i, 4);
    }
    if (vocab_size > 0 && t >= static_cast<uint64_t>(vocab_size)) {
      throw DataError("token shard " + path.string() + " has token " + std::to_string(t) + " at position " +
                      std::to_string(i) + ", outside the model's vocab_size " + std::to_string(vocab_size) +
                      ": was it prepared with a different tokenizer?");
    }
    tokens[i] = static_cast<int32_t>(t);
  }
  return tokens;
}

std::vector<int32_t> read_shard_tokens(const fs::path& path, int64_t vocab_size) {
  int token_bytes = 0;
  return read_tokens(path, vocab_size, &token_bytes);
}

std::vector<uint16_t> read_shard(const fs::path& path, int64_t vocab_size) {
  int token_bytes = 0;
  const std::vector<int32_t> tokens = read_tokens(path, vocab_size, &token_bytes);
  if (token_bytes != 2)
    throw DataError("token shard " + path.string() + " holds uint32 tokens; read it with read_shard_tokens");
  return std::vector<uint16_t>(tokens.begin(), tokens.end());
}

Shard::Shard(const fs::path& path, int64_t vocab_size) : file_(path) {
  const ShardHeader h = parse_shard_header(file_.bytes(), path);
  // The body starts 1024 bytes into a page-aligned mapping, so token access is aligned.
  const std::byte* body = file_.bytes().data() + kShardHeaderBytes;
  size_ = h.num_tokens;
  token_bytes_ = h.token_bytes;
  if (token_bytes_ == 2) u16_ = reinterpret_cast<const uint16_t*>(body);
  else u32_ = reinterpret_cast<const uint32_t*>(body);
  check_vocab(*this, vocab_size);
}

void Shard::copy(int64_t start, int64_t n, int32_t* out) const {
  if (token_bytes_ == 2) {
    const uint16_t* t = u16_ + start;
    for (int64_t i = 0; i < n; ++i) out[i] = t[i];
  } else {
    const uint32_t* t = u32_ + start;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(t[i]);
  }
}

}  // namespace precon::worker
