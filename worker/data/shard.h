// Token shards in llm.c's format, so llm.c / nanoGPT-style data is reusable:
//   header: 256 little-endian int32 = {magic, version, token count, 0...}
//   body:   token count tokens: uint16 for {20240520, 1} (GPT-2's vocabulary) or uint32 for
//           {20240801, 7} (llm.c's Llama 3 kind: vocabularies past 65,536)
// A shard is written once (atomically) and read many times, either into memory or mapped.
// Thread-safety: a Shard is immutable after open and may be read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

inline constexpr int32_t kShardMagic = 20240520;  // uint16 tokens
inline constexpr int32_t kShardVersion = 1;
inline constexpr int32_t kShardMagic32 = 20240801;  // uint32 tokens
inline constexpr int32_t kShardVersion32 = 7;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

struct ShardHeader {
  int32_t magic = 0;
  int32_t version = 0;
  int64_t num_tokens = 0;
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32), from the magic
};

// Writes `tokens` as a shard at `path` (temp file + fsync + rename). Throws DataError when
// there are more tokens than the int32 header field can count, IoError on write failure.
void write_shard(const fs::path& path, std::span<const uint16_t> tokens);
// The uint32 kind (magic 20240801, version 7), for vocabularies past 65,536.
void write_shard(const fs::path& path, std::span<const uint32_t> tokens);

// Parses and validates the header of a whole shard file held in `bytes`: magic and
// version (one of the two kinds) and a body length that matches the token count. Errors name `path` (used only
// for messages) and what mismatched.
ShardHeader parse_shard_header(std::span<const std::byte> bytes, const fs::path& path);

// Reads a whole uint16 shard into memory. vocab_size > 0 rejects tokens >= vocab_size, naming
// the first offending position. A uint32 shard is refused: read_shard_tokens reads both kinds.
std::vector<uint16_t> read_shard(const fs::path& path, int64_t vocab_size = 0);
std::vector<int32_t> read_shard_tokens(const fs::path& path, int64_t vocab_size = 0);

// A memory-mapped, validated shard: the loader's view of one file.
class Shard {
 public:
  explicit Shard(const fs::path& path, int64_t vocab_size = 0);

  int64_t size() const { return size_; }
  int token_bytes() const { return token_bytes_; }
  uint32_t at(int64_t i) const { return token_bytes_ == 2 ? u16_[i] : u32_[i]; }
  // Copies tokens [start, start + n) into out.
  void copy(int64_t start, int64_t n, int32_t* out) const;
  const fs::path& path() const { return file_.path(); }

 private:
  MappedFile file_;
  int64_t size_ = 0;
  int token_bytes_ = 2;
  const uint16_t* u16_ = nullptr;
  const uint32_t* u32_ = nullptr;
};

}  // namespace precon::worker
