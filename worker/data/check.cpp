#include <algorithm>
#include <string>

#include "worker/common/error.h"
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
    const auto* tokens = reinterpret_cast<const uint16_t*>(file.bytes().data() + kShardHeaderBytes);
    const int64_t stride = std::max<int64_t>(1, h.num_tokens / kTokenSample);
    for (int64_t i = 0; i < h.num_tokens; i += stride)
      if (tokens[i] >= vocab_size)
        return "token shard " + path.string() + " has token " + std::to_string(tokens[i]) + " at position " +
               std::to_string(i) + ", outside model.vocab_size = " + std::to_string(vocab_size);
  } catch (const WorkerError& e) {
    return e.what();
  }
  return "";
}

}  // namespace precon::worker
