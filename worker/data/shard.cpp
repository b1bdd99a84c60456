#include "worker/data/shard.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "worker/common/error.h"

namespace precon::worker {

// The format is little-endian on disk; every machine we target is too, so a static check
// is cheaper than byte swapping on every read.
static_assert(std::endian::native == std::endian::little, "token shards assume a little-endian host");

void write_shard(const fs::path& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw DataError("cannot write shard " + path.string() + ": " + std::to_string(tokens.size()) +
                    " tokens exceed the format's int32 token count; split the data into several shards");
  }
  std::vector<uint8_t> bytes(kShardHeaderBytes + tokens.size() * sizeof(uint16_t), 0);
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, kShardHeaderBytes);
  if (!tokens.empty()) std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), tokens.size_bytes());
  write_file_atomic(path, bytes);
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
  if (h[0] != kShardMagic) {
    // The file's bytes are not quoted: the message reaches logs that others may read, and a
    // recipe can name any file (/etc/passwd).
    throw DataError(name + " is not a precon/llm.c token shard (its header does not start with the magic " +
                    std::to_string(kShardMagic) + "): was it written by a different tool?");
  }
  if (h[1] != kShardVersion) {
    throw DataError("token shard " + name + " has version " + std::to_string(h[1]) + ", expected " +
                    std::to_string(kShardVersion) + " (uint16 tokens); re-create it with prepare-data");
  }
  if (h[2] < 0) {
    throw DataError("token shard " + name + " has a negative token count (" + std::to_string(h[2]) + ")");
  }
  const uint64_t expected = static_cast<uint64_t>(h[2]) * sizeof(uint16_t);
  const uint64_t found = bytes.size() - kShardHeaderBytes;
  if (found != expected) {
    throw DataError("token shard " + name + (found < expected ? " is truncated" : " has trailing bytes") +
                    ": header says " + std::to_string(h[2]) + " tokens (" + std::to_string(expected) +
                    " bytes), found " + std::to_string(found) + " bytes after the header");
  }
  return ShardHeader{h[0], h[1], h[2]};
}

static void check_vocab(std::span<const uint16_t> tokens, int64_t vocab_size, const fs::path& path) {
  if (vocab_size <= 0 || vocab_size > 65536) return;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw DataError("token shard " + path.string() + " has token " + std::to_string(tokens[i]) +
                      " at position " + std::to_string(i) + ", outside the model's vocab_size " +
                      std::to_string(vocab_size) + ": was it prepared with a different tokenizer?");
    }
  }
}

std::vector<uint16_t> read_shard(const fs::path& path, int64_t vocab_size) {
  std::vector<uint8_t> bytes = read_file(path);
  ShardHeader h = parse_shard_header(std::as_bytes(std::span(bytes)), path);
  std::vector<uint16_t> tokens(static_cast<size_t>(h.num_tokens));
  if (!tokens.empty()) std::memcpy(tokens.data(), bytes.data() + kShardHeaderBytes, tokens.size() * 2);
  check_vocab(tokens, vocab_size, path);
  return tokens;
}

Shard::Shard(const fs::path& path, int64_t vocab_size) : file_(path) {
  ShardHeader h = parse_shard_header(file_.bytes(), path);
  // The body starts 1024 bytes into a page-aligned mapping, so uint16 access is aligned.
  const auto* body = reinterpret_cast<const uint16_t*>(file_.bytes().data() + kShardHeaderBytes);
  tokens_ = std::span<const uint16_t>(body, static_cast<size_t>(h.num_tokens));
  check_vocab(tokens_, vocab_size, path);
}

}  // namespace precon::worker
