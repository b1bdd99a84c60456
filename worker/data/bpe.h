// The one byte-level BPE engine and the one pre-tokenizer behind every BPE Tokenizer
// (worker/data/tokenizer.h): tiktoken's encodings, Hugging Face tokenizer.json files and GPT-2's
// encoder.json + vocab.bpe differ only in how they are loaded.
//
// Text -> [added tokens split out] -> [NFC] -> Pretokenizer (PCRE2 regex splits) -> pieces ->
// BpeModel (each piece's bytes -> token ids by merge rank).
//
// BpeModel works on ids: a (left id, right id) -> (rank, merged id) table built once from the
// merges, so merging never builds strings; each piece starts as one token per byte. The lowest
// rank merges first, the leftmost of equal ranks first: Hugging Face's BPE, and tiktoken's when
// the merges are every split of every token ranked by the token (merges_from_ranks). A bounded
// per-piece cache makes repeated words cost one hash lookup.
// Thread-safety: encode_piece and Pretokenizer::for_each_piece use scratch state; one per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "worker/data/tokenizer.h"

namespace precon::worker {

// GPT-2's byte-level alphabet (bytes_to_unicode): the printable character (UTF-8) that
// byte-level vocabularies write for byte b.
const std::string& byte_level_char(uint8_t b);
// The bytes a byte-level vocabulary entry stands for; nullopt when one of its characters is not
// one of the 256 byte characters (an entry the BPE never produces, e.g. an added token).
std::optional<std::string> byte_level_bytes(std::string_view entry);

struct BpeMerge {
  int32_t left = 0, right = 0;  // the ids merged, in this order
  int32_t merged = 0;           // the id of their concatenation
  int32_t rank = 0;             // lower merges first; among equal ranks the leftmost first
};

// Hashing for string keys that also finds std::string_view keys.
struct BytesHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, int32_t, BytesHash, std::equal_to<>>;

class BpeModel {
 public:
  // token_bytes[id]: the bytes of each token the BPE can produce ("" for ids it cannot). A piece
  // holding a byte that has no single-byte token throws DataError ending in missing_byte_hint.
  // ignore_merges: a piece that is a whole token is that token (tiktoken; Llama 3's option).
  BpeModel(std::vector<std::string> token_bytes, const std::vector<BpeMerge>& merges, bool ignore_merges,
           std::string missing_byte_hint);
  // tiktoken's merges: every split of a token into two tokens, ranked by the token's id (its rank).
  static std::vector<BpeMerge> merges_from_ranks(const std::vector<std::string>& token_bytes);

  // Appends the ids of one piece (its bytes as they are in the text).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);
  // The token with exactly these bytes.
  std::optional<int32_t> find(std::string_view bytes) const;

 private:
  struct PairSlot {
    uint64_t key = ~uint64_t{0};  // left << 32 | right; all ones = empty
    int32_t rank = 0, merged = 0;
  };
  static constexpr size_t kCacheKeyBytes = 22;  // longer pieces are not cached
  static constexpr size_t kCacheIds = 9;        // nor pieces of more tokens
  struct CacheSlot {
    uint8_t key_len = 0xFF;  // 0xFF = empty
    uint8_t n_ids = 0;
    char key[kCacheKeyBytes];
    int32_t ids[kCacheIds];
  };

  const PairSlot* find_pair(int32_t left, int32_t right) const;
  void merge(std::string_view piece, std::vector<int32_t>& out);

  std::vector<std::string> token_bytes_;
  BytesToId by_bytes_;
  int32_t byte_token_[256];
  std::vector<PairSlot> pairs_;  // open addressing, a power of two
  bool ignore_merges_;
  std::string missing_byte_hint_;
  std::vector<CacheSlot> cache_;  // direct-mapped by the piece's hash
  // Scratch for merge(): the symbols of the piece, a linked list, and the heap of candidates.
  struct Candidate {
    int32_t rank;
    uint32_t pos;
  };
  std::vector<int32_t> sym_id_;
  std::vector<uint32_t> sym_next_, sym_prev_;
  std::vector<Candidate> heap_;
};

enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// Splits text into pieces by steps run in order, each on every piece the previous one gave:
// regex splits with Hugging Face's delimiter behaviours, and ByteLevel's prefix space. Regexes
// are PCRE2 (UTF, UCP, JIT), `\s`/`\S` rewritten to Unicode White_Space; a regex is matched
// against each piece alone (lookarounds do not see past it); empty matches split nothing.
class Pretokenizer {
 public:
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // Throws DataError naming `where` when the pattern does not compile.
  void add_split(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert, const std::string& where);
  // A piece that does not start with ' ' gets one (ByteLevel's add_prefix_space).
  void add_prefix_space();
  bool empty() const;

  // Calls emit for each non-empty piece, in order; a piece is valid during the call only.
  // `text` must be valid UTF-8.
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& emit);

 private:
  struct Step;
  void run(size_t step, std::string_view text, const std::function<void(std::string_view)>& emit);
  std::vector<Step> steps_;
};

// GPT-2's pattern, as tiktoken's gpt2 encoding and Hugging Face's ByteLevel(use_regex) use it.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A token that is matched in the text before pre-tokenization (Hugging Face's added tokens).
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;  // only where no word character touches it
  bool lstrip = false;       // takes the white space on its left
  bool rstrip = false;       // takes the white space on its right
  bool normalized = false;   // matched in the normalized text (else in the text as given)
};

// Everything a BPE tokenizer is; the loaders fill it in.
struct BpeTokenizerParts {
  std::string name;
  std::unique_ptr<BpeModel> model;
  Pretokenizer pretokenizer;
  bool nfc = false;                 // normalize to NFC after splitting out non-normalized added tokens
  std::vector<AddedToken> added;    // matched leftmost-longest in the text
  std::vector<std::string> id_text; // id -> bytes for decode, specials and added tokens included
  BytesToId special;                // token_id() of special/added tokens by content
  std::optional<int32_t> eod;
  int64_t vocab_size = 0;
};
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeTokenizerParts parts);

// A byte-level vocabulary (entries in byte_level_char's alphabet -> id) and its merges in rank
// order, as Hugging Face's BPE and GPT-2's files give them. Fills *id_text (what decode gives for
// each id: an entry's bytes, or for an entry outside the alphabet its own UTF-8). Throws DataError
// naming vocab_where for two entries with one id, merge_where(index) for a merge whose parts or
// result the vocabulary lacks.
std::unique_ptr<BpeModel> make_byte_level_model(const BytesToId& vocab,
                                                const std::vector<std::pair<std::string, std::string>>& merges,
                                                bool ignore_merges, const std::string& vocab_where,
                                                const std::function<std::string(size_t)>& merge_where,
                                                std::string missing_byte_hint, std::vector<std::string>* id_text);

// The loaders behind make_tokenizer (worker/data/tokenizer_tiktoken.cpp, tokenizer_hf.cpp).
std::unique_ptr<Tokenizer> make_tiktoken_tokenizer(const std::string& encoding, const TokenizerOptions& options);
std::unique_ptr<Tokenizer> make_hf_tokenizer(const fs::path& tokenizer_json);

// GPT-2's pre-tokenization of valid UTF-8 text; the pieces concatenate back to `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// The `--encoder`/`--vocab` tokenizer under its earlier name (make_gpt2_files_tokenizer).
class Gpt2Bpe {
 public:
  // Throws DataError naming the file on malformed input.
  Gpt2Bpe(const fs::path& encoder_json, const fs::path& vocab_bpe);
  std::vector<int32_t> encode(std::string_view text) { return impl_->encode(text); }
  std::optional<int32_t> token_id(const std::string& token) const { return impl_->token_id(token); }
  int64_t vocab_size() const { return impl_->vocab_size(); }

 private:
  std::unique_ptr<Tokenizer> impl_;
};

}  // namespace precon::worker
