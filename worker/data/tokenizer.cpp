// make_tokenizer, the bytes tokenizer, and UTF-8 decoding as the references do it.
#include "worker/data/tokenizer.h"

#include <cstring>

#include "worker/common/error.h"
#include "worker/data/bpe.h"

namespace precon::worker {

namespace {

// The length of the valid UTF-8 sequence at s[i] (true), or of its maximal invalid subpart
// (false, at least 1): WHATWG's decoder, which replaces each such subpart by one U+FFFD.
bool utf8_sequence(std::string_view s, size_t i, size_t* length) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c < 0x80) {
    *length = 1;
    return true;
  } else if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    *length = 1;
    return false;
  }
  for (size_t k = 1; k <= need; ++k) {
    const bool ok = i + k < s.size() && at(k) >= (k == 1 ? lo : 0x80) && at(k) <= (k == 1 ? hi : 0xBF);
    if (!ok) {
      *length = k;
      return false;
    }
  }
  *length = need + 1;
  return true;
}

// The offset of the first byte at or after `i` that is not ASCII (8 bytes at a time).
size_t skip_ascii(std::string_view s, size_t i) {
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
  return i;
}

class BytesTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) override {
    std::string storage;
    text = replace_invalid_utf8(text, storage);
    return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id > 255) throw DataError("token id " + std::to_string(id) + " is not a byte (the bytes tokenizer)");
      out += static_cast<char>(id);
    }
    return out;
  }
  int64_t vocab_size() const override { return 256; }
  std::optional<int32_t> eod() const override { return std::nullopt; }
  std::string name() const override { return "bytes"; }
  std::optional<int32_t> token_id(std::string_view token) const override {
    if (token.size() != 1) return std::nullopt;
    return static_cast<unsigned char>(token[0]);
  }
};

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  for (size_t i = skip_ascii(text, 0), n = 0; i < text.size(); i = skip_ascii(text, i + n)) {
    if (!utf8_sequence(text, i, &n)) return i;
  }
  return std::nullopt;
}

std::string_view replace_invalid_utf8(std::string_view text, std::string& storage) {
  const std::optional<size_t> first = find_invalid_utf8(text);
  if (!first) return text;
  storage.assign(text.substr(0, *first));
  for (size_t i = *first, n = 0; i < text.size(); i += n) {
    if (utf8_sequence(text, i, &n)) {
      storage.append(text.substr(i, n));
    } else {
      storage.append("\xEF\xBF\xBD");
    }
  }
  return storage;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const TokenizerOptions& options) {
  if (spec == "gpt2" || spec == "cl100k_base" || spec == "o200k_base") return make_tiktoken_tokenizer(spec, options);
  if (spec == "bytes") return std::make_unique<BytesTokenizer>();
  std::error_code ec;
  if (!spec.empty() && fs::is_regular_file(spec, ec)) return make_hf_tokenizer(spec);
  throw DataError("unknown tokenizer \"" + spec +
                  "\": expected gpt2, cl100k_base, o200k_base, bytes or the path of a Hugging Face tokenizer.json "
                  "(no such file)");
}

}  // namespace precon::worker
