// Megatron indexed datasets (prefix.idx + prefix.bin) through IndexedDataset and
// check_indexed_dataset, as the loader and `recipe check` open them. Input: two bytes of
// vocab_size and two bytes of the .idx length L (little-endian; vocab_size 0 = no check), then L
// bytes of .idx (fewer when the input ends first) and the rest as .bin. Allowed failure:
// worker::DataError (from read() too, for an int64 token outside int32 when no vocab_size is
// given). Invariants: an opened dataset is consistent (lengths sum to total_tokens, which fills
// the .bin exactly; the document index runs from 0 to sequences() without decreasing), every
// sequence reads whole, every token is in [0, vocab_size) when one is given, and the check
// agrees with the constructor (inputs this small are sampled whole).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "worker/common/error.h"
#include "worker/data/indexed.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace precon;
  if (size < 4) return 0;
  const int64_t vocab = data[0] | (data[1] << 8);
  const size_t idx_len = std::min<size_t>(data[2] | (data[3] << 8), size - 4);
  fuzz::write_scratch("data.idx", fuzz::as_text(data + 4, idx_len));
  fuzz::write_scratch("data.bin", fuzz::as_text(data + 4 + idx_len, size - 4 - idx_len));
  const std::string prefix = (fuzz::scratch_dir() / "data").string();
  if (!worker::is_indexed_prefix(prefix) && idx_len >= 9 && std::memcmp(data + 4, worker::kIndexedMagic, 9) == 0)
    fuzz::fail("is_indexed_prefix missed the magic");

  const std::string check = worker::check_indexed_dataset(prefix, 0, vocab);
  bool opened = false;
  int64_t total = 0;
  try {
    const worker::IndexedDataset d(prefix, vocab);
    opened = true;
    total = d.total_tokens();
    const auto doc = d.document_index();
    if (doc.empty() || doc.front() != 0 || doc.back() != d.sequences()) fuzz::fail("document index does not run from 0 to sequences()");
    for (size_t j = 1; j < doc.size(); ++j)
      if (doc[j] < doc[j - 1]) fuzz::fail("document index decreases");
    int64_t sum = 0;
    std::vector<int32_t> tokens;
    for (int64_t s = 0; s < d.sequences(); ++s) {
      const int64_t n = d.sequence_length(s);
      if (n < 0) fuzz::fail("negative sequence length");
      sum += n;
      tokens.resize(static_cast<size_t>(n));
      try {
        d.read(s, 0, n, tokens.data());
      } catch (const worker::DataError&) {
        if (vocab > 0 || d.dtype() != worker::TokenDType::int64) fuzz::fail("read refused a token the constructor accepted");
        continue;
      }
      for (int32_t t : tokens)
        if (vocab > 0 && (t < 0 || t >= vocab)) fuzz::fail("token " + std::to_string(t) + " passed vocab_size " + std::to_string(vocab));
    }
    if (sum != total) fuzz::fail("sequence lengths do not sum to total_tokens");
    if (total * worker::token_dtype_size(d.dtype()) != static_cast<int64_t>(size - 4 - idx_len))
      fuzz::fail("the sequences do not fill the .bin");
  } catch (const worker::DataError&) {
  }
  const bool check_ok = check.empty();
  if (check_ok != (opened && total >= 1)) fuzz::fail("check_indexed_dataset and IndexedDataset disagree: " + check);
  return 0;
}
