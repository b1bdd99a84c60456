// Token shards in llm.c's format, so llm.c / nanoGPT-style data is reusable:
//   header: 256 little-endian int32 = {magic 20240520, version 1, token count, 0...}
//   body:   token count × uint16 tokens
// A shard is written once (atomically) and read many times, either into memory or mapped.
// Thread-safety: a Shard is immutable after open and may be read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

struct ShardHeader {
  int32_t magic = 0;
  int32_t version = 0;
  int64_t num_tokens = 0;
};

// Writes `tokens` as a shard at `path` (temp file + fsync + rename). Throws DataError when
// there are more tokens than the int32 header field can count, IoError on write failure.
void write_shard(const fs::path& path, std::span<const uint16_t> tokens);

// Parses and validates the header of a whole shard file held in `bytes`: magic,
// version and a body length that matches the token count. Errors name `path` (used only
// for messages) and what mismatched.
ShardHeader parse_shard_header(std::span<const std::byte> bytes, const fs::path& path);

// Reads a whole shard into memory. vocab_size > 0 rejects tokens >= vocab_size, naming the
// first offending position.
std::vector<uint16_t> read_shard(const fs::path& path, int64_t vocab_size = 0);

// A memory-mapped, validated shard: the loader's view of one file.
class Shard {
 public:
  explicit Shard(const fs::path& path, int64_t vocab_size = 0);

  std::span<const uint16_t> tokens() const { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const fs::path& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::span<const uint16_t> tokens_;
};

}  // namespace precon::worker
