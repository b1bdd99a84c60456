// GPT-2's BPE files and encoder, as `precon data prepare --tokenizer gpt2` reads them. Input:
// encoder.json NUL vocab.bpe NUL text. Allowed failure: worker::DataError. Invariants: the
// pre-tokenizer's pieces concatenate back to the text; every id the encoder gives is below
// vocab_size.
#include "tests/fuzz/fuzz_util.h"
#include "worker/common/error.h"
#include "worker/data/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace precon;
  const std::vector<std::string> parts = fuzz::split_nul(fuzz::as_text(data, size), 3);
  const std::string& text = parts[2];
  const bool valid = !worker::find_invalid_utf8(text).has_value();
  if (valid) {
    std::string joined;
    for (std::string_view piece : worker::gpt2_pretokenize(text)) {
      if (piece.empty()) fuzz::fail("an empty pre-token");
      joined += piece;
    }
    if (joined != text) fuzz::fail("the pre-tokens do not concatenate back to the text");
  }
  try {
    worker::Gpt2Bpe bpe(fuzz::write_scratch("encoder.json", parts[0]), fuzz::write_scratch("vocab.bpe", parts[1]));
    if (!valid) return 0;
    for (int32_t id : bpe.encode(text)) {
      if (id < 0 || id >= bpe.vocab_size()) fuzz::fail("id " + std::to_string(id) + " outside the vocabulary");
    }
  } catch (const worker::DataError&) {
  }
  return 0;
}
