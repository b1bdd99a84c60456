#include <algorithm>
#include <string>

#include "worker/common/error.h"
#include "worker/data/indexed.h"
#include "worker/data/prepare.h"
#include "worker/data/shard.h"

namespace precon::worker {

std::string check_token_file(const fs::path& path, int64_t seq_len, int64_t vocab_size) {
  try {
    const MappedFile file(path);
    const ShardHeader h = parse_shard_header(file.bytes(), path);
    if (h.num_tokens < seq_len + 1)
      return "token shard " + path.string() + " has " + std::to_string(h.num_tokens) + " tokens, fewer than seq_len + 1 = " +
             std::to_string(seq_len + 1) + " needed for one (input, target) window";
    if (vocab_size <= 0) return "";
    // A sample spread over the file: a whole scan of a large corpus is the trainer's (it maps it anyway).
    const std::byte* body = file.bytes().data() + kShardHeaderBytes;
    const auto token = [&](int64_t i) -> uint32_t {
      return h.token_bytes == 2 ? reinterpret_cast<const uint16_t*>(body)[i] : reinterpret_cast<const uint32_t*>(body)[i];
    };
    const int64_t stride = std::max<int64_t>(1, h.num_tokens / kTokenSample);
    for (int64_t i = 0; i < h.num_tokens; i += stride)
      if (token(i) >= static_cast<uint64_t>(vocab_size))
        return "token shard " + path.string() + " has token " + std::to_string(token(i)) + " at position " +
               std::to_string(i) + ", outside model.vocab_size = " + std::to_string(vocab_size);
  } catch (const WorkerError& e) {
    return e.what();
  }
  return "";
}

bool data_path_exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) || fs::exists(path + ".idx", ec) || fs::exists(path + ".bin", ec);
}

std::string check_data_path(const std::string& path, const std::string& format, int64_t seq_len, int64_t vocab_size) {
  const bool megatron = format == "megatron" || (format != "llmc" && is_indexed_prefix(path));
  if (megatron) return check_indexed_dataset(path, seq_len, vocab_size);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) && (fs::exists(path + ".idx", ec) || fs::exists(path + ".bin", ec)))
    return path + " is not a file, and " + path + ".idx is missing or is not a Megatron index (MMIDIDX)";
  return check_token_file(path, seq_len, vocab_size);
}

}  // namespace precon::worker
