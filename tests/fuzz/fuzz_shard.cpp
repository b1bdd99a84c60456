// Token shards (llm.c's format, both kinds: uint16 and uint32 tokens) from a file, as the loader
// and `precon data` read them: the whole-file reader and the memory-mapped Shard. Input: two bytes of vocab_size (little-endian;
// 0 = no check), then the file. Allowed failure: worker::DataError. Invariant: both readers agree
// (the same tokens, or both refuse), and every token is below vocab_size when one is given.
#include <cstring>

#include "tests/fuzz/fuzz_util.h"
#include "worker/common/error.h"
#include "worker/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace precon;
  if (size < 2) return 0;
  const int64_t vocab = data[0] | (data[1] << 8);
  const auto path = fuzz::write_scratch("shard.bin", fuzz::as_text(data + 2, size - 2));
  std::vector<int32_t> read;
  bool read_ok = true, mapped_ok = true;
  try {
    read = worker::read_shard_tokens(path, vocab);
  } catch (const worker::DataError&) {
    read_ok = false;
  }
  try {
    const worker::Shard shard(path, vocab);
    std::vector<int32_t> mapped(static_cast<size_t>(shard.size()));
    shard.copy(0, shard.size(), mapped.data());
    if (read_ok && mapped != read) fuzz::fail("read_shard_tokens and Shard disagree on the tokens");
  } catch (const worker::DataError&) {
    mapped_ok = false;
  }
  if (read_ok != mapped_ok) fuzz::fail("read_shard_tokens and Shard disagree on whether the shard is valid");
  for (int32_t t : read) {
    if (vocab > 0 && t >= vocab) fuzz::fail("token " + std::to_string(t) + " passed vocab_size " + std::to_string(vocab));
  }
  return 0;
}
