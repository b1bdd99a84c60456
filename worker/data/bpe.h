// GPT-2's byte-level BPE tokenizer, from its two published files: encoder.json (token
// string -> id) and vocab.bpe (merges, one "a b" pair per line, in rank order).
//
// Text is first split by gpt2_pretokenize(), a hand-written equivalent of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Each piece's bytes are mapped to printable characters (bytes_to_unicode) and merged by
// rank. \s is Unicode White_Space; \p{L} and \p{N} are the Unicode general categories L*
// and N*, from tables generated out of the Unicode Character Database (unicode_classes.inc
// names its version; code points assigned later count as "other").
// tests/interop/bpe_vs_tiktoken.py checks the whole encoder against js-tiktoken.
// Thread-safety: encode() uses a cache; one Gpt2Bpe per thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

// Offset of the first byte that is not valid UTF-8 (overlongs and surrogates included), or
// nullopt when all of `text` is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// GPT-2's pre-tokenization of valid UTF-8 text; the pieces concatenate back to `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class Gpt2Bpe {
 public:
  // Throws DataError naming the file on malformed input.
  Gpt2Bpe(const fs::path& encoder_json, const fs::path& vocab_bpe);

  // Token ids of valid UTF-8 text. Throws DataError when a merged symbol is missing from
  // the encoder (encoder.json and vocab.bpe do not belong together).
  std::vector<int32_t> encode(std::string_view text);

  std::optional<int32_t> token_id(const std::string& token) const;  // e.g. "<|endoftext|>"
  int64_t vocab_size() const { return vocab_size_; }                 // largest id + 1

 private:
  const std::vector<int32_t>& encode_piece(std::string_view piece);

  std::unordered_map<std::string, int32_t> encoder_;
  std::unordered_map<std::string, int32_t> ranks_;  // "a b" -> merge rank
  std::array<std::string, 256> byte_symbol_;        // byte -> its printable UTF-8 character
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
  int64_t vocab_size_ = 0;
  fs::path encoder_path_;
};

}  // namespace precon::worker
