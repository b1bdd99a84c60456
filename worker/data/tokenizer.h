// Tokenizers for `precon data prepare`: GPT-2's and tiktoken's encodings, Hugging Face
// byte-level BPE tokenizer.json files, and plain bytes. All BPE tokenizers share one engine
// (worker/data/bpe.h): a pre-tokenizer running PCRE2 regexes, then byte pair merges over token
// ids by rank.
//
//   "gpt2", "cl100k_base", "o200k_base"  tiktoken's encodings, from js-tiktoken's rank files
//       (ranks/<name>.cjs), searched for in TokenizerOptions::tiktoken_dir, $PRECON_TIKTOKEN_DIR,
//       <program dir>/../share/precon/tiktoken and the build tree's share/precon/tiktoken (the
//       build fetches them). Special tokens in the text are plain text (tiktoken's
//       encode_ordinary); eod() is <|endoftext|>.
//   a path to tokenizer.json  Hugging Face byte-level BPE (Llama 3, Qwen2, GPT-NeoX/Pythia, GPT-2):
//       normalizer null or NFC; pre-tokenizers ByteLevel and Split (in a Sequence); model BPE
//       with ignore_merges; added tokens are matched in the text as Hugging Face does. The
//       post-processor is not applied (no BOS is added). eod(): the first added token (or vocab
//       entry) among <|endoftext|>, <|end_of_text|>, </s>, <|im_end|>.
//   "bytes"  id = byte value, vocab 256, no eod.
//
// Regexes: `\s` means Unicode White_Space (as in Python's regex, Rust tiktoken and Oniguruma);
// JavaScript's \s differs on U+0085 (not space there) and U+FEFF (space there). Unicode
// properties come from PCRE2's tables (10.42: Unicode 14.0): code points assigned later are
// "other" (\p{Cn}).
// Thread-safety: a Tokenizer caches pieces; use one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text`. Invalid UTF-8 is decoded as the references do (WHATWG / Python
  // errors="replace": each maximal invalid subpart becomes U+FFFD). Not thread-safe (caches);
  // one Tokenizer per thread.
  virtual std::vector<int32_t> encode(std::string_view text) = 0;
  // The bytes of the tokens, concatenated. Throws DataError for an id no token has.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;          // largest id + 1, special/added tokens included
  virtual std::optional<int32_t> eod() const = 0;  // the end-of-document token, if the tokenizer has one
  // "gpt2", "cl100k_base", "o200k_base", "bytes", "hf:<file name>", "gpt2-bpe"
  virtual std::string name() const = 0;
  // The id of the token whose text is `token`: a special or added token's content, else the
  // vocabulary entry with exactly these bytes.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
};

struct TokenizerOptions {
  fs::path tiktoken_dir;  // where ranks/<name>.cjs files are; "" = the default search (above)
};

// spec: "gpt2" | "cl100k_base" | "o200k_base" | "bytes" | a path to a Hugging Face tokenizer.json.
// Throws DataError with a message that names the file or key and what is wrong (never the file's
// bytes); IoError when a file cannot be read.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const TokenizerOptions& options = {});

// GPT-2's published encoder.json + vocab.bpe (`--encoder`/`--vocab`), named "gpt2-bpe": the same
// byte-level BPE with GPT-2's pattern; eod() is <|endoftext|> when the encoder lists it.
std::unique_ptr<Tokenizer> make_gpt2_files_tokenizer(const fs::path& encoder_json, const fs::path& vocab_bpe);

// The directories searched for tiktoken rank files, in order (see above).
std::vector<fs::path> tiktoken_search_path(const TokenizerOptions& options);

// Offset of the first byte that is not valid UTF-8 (overlongs and surrogates included), or
// nullopt when all of `text` is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// `text` with each maximal invalid subpart replaced by U+FFFD (WHATWG's UTF-8 decoder, Python's
// errors="replace"). Returns a view of `text` itself when it is valid, else of `storage`.
std::string_view replace_invalid_utf8(std::string_view text, std::string& storage);

}  // namespace precon::worker
