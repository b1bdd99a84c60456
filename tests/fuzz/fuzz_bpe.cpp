// GPT-2's BPE files and the byte-level BPE engine, as `precon data prepare --encoder --vocab`
// reads them; the first part also as a Hugging Face tokenizer.json (`--tokenizer FILE.json`).
// Input: encoder.json NUL vocab.bpe NUL text. Allowed failure: worker::DataError.
// Invariants: the pre-tokenizer's pieces of valid text concatenate back to it; every id a
// tokenizer gives is below its vocab_size; GPT-2's ids decode to the text with each invalid
// UTF-8 subpart as U+FFFD.
#include "tests/fuzz/fuzz_util.h"
#include "worker/common/error.h"
#include "worker/data/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace precon;
  const std::vector<std::string> parts = fuzz::split_nul(fuzz::as_text(data, size), 3);
  const std::string& text = parts[2];
  if (!worker::find_invalid_utf8(text).has_value()) {
    std::string joined;
    for (std::string_view piece : worker::gpt2_pretokenize(text)) {
      if (piece.empty()) fuzz::fail("an empty pre-token");
      joined += piece;
    }
    if (joined != text) fuzz::fail("the pre-tokens do not concatenate back to the text");
  }
  try {
    auto tok = worker::make_gpt2_files_tokenizer(fuzz::write_scratch("encoder.json", parts[0]),
                                                 fuzz::write_scratch("vocab.bpe", parts[1]));
    const std::vector<int32_t> ids = tok->encode(text);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) fuzz::fail("id " + std::to_string(id) + " outside the vocabulary");
    }
    std::string storage;
    if (tok->decode(ids) != worker::replace_invalid_utf8(text, storage)) {
      fuzz::fail("the ids do not decode back to the text");
    }
  } catch (const worker::DataError&) {
  }
  try {
    auto tok = worker::make_tokenizer(fuzz::write_scratch("tokenizer.json", parts[0]).string());
    for (int32_t id : tok->encode(text)) {
      if (id < 0 || id >= tok->vocab_size()) fuzz::fail("tokenizer.json: id " + std::to_string(id) + " outside the vocabulary");
    }
  } catch (const worker::DataError&) {
  }
  return 0;
}
