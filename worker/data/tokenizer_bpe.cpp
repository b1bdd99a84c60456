// The BPE Tokenizer: added tokens split out, NFC, pre-tokenization, BPE per piece.
#include <algorithm>
#include <array>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include "worker/common/error.h"
#include "worker/data/bpe.h"

namespace precon::worker {

namespace {

char32_t code_point_at(std::string_view s, size_t i) {
  UChar32 c;
  U8_NEXT_UNSAFE(s.data(), i, c);
  return static_cast<char32_t>(c);
}

char32_t code_point_before(std::string_view s, size_t end) {
  UChar32 c;
  U8_PREV_UNSAFE(s.data(), end, c);
  return static_cast<char32_t>(c);
}

// Rust's \w (Unicode's word characters), which Hugging Face's single_word test uses.
bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL) ||
         (U_GET_GC_MASK(u) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

// Added tokens found leftmost-longest and non-overlapping, then kept or dropped by their
// single_word / lstrip / rstrip flags exactly as Hugging Face's AddedVocabulary does.
class AddedTokenSplitter {
 public:
  AddedTokenSplitter() { first_byte_.fill(false); }
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
    first_byte_.fill(false);
    std::stable_sort(tokens_.begin(), tokens_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    std::erase_if(tokens_, [](const AddedToken& t) { return t.content.empty(); });
    for (const AddedToken& t : tokens_) first_byte_[static_cast<unsigned char>(t.content[0])] = true;
  }
  bool empty() const { return tokens_.empty(); }

  // Calls text(segment) for the text between tokens and token(id) for each token, in order.
  template <class Text, class Token>
  void split(std::string_view s, Text&& text, Token&& token) const {
    size_t done = 0;  // the end of the last token kept
    for (size_t pos = 0; pos < s.size();) {
      const AddedToken* hit = nullptr;
      if (first_byte_[static_cast<unsigned char>(s[pos])]) {
        for (const AddedToken& t : tokens_) {
          if (s.compare(pos, t.content.size(), t.content) == 0) {
            hit = &t;
            break;
          }
        }
      }
      if (hit == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + hit->content.size();
      pos = stop;
      if (start < done) continue;  // inside white space an rstrip token took
      if (hit->single_word && ((start > 0 && is_word_char(code_point_before(s, start))) ||
                               (stop < s.size() && is_word_char(code_point_at(s, stop))))) {
        continue;
      }
      if (hit->lstrip) {
        while (start > done && u_isUWhiteSpace(static_cast<UChar32>(code_point_before(s, start)))) {
          size_t k = start;
          U8_BACK_1_UNSAFE(reinterpret_cast<const uint8_t*>(s.data()), k);
          start = k;
        }
      }
      if (hit->rstrip) {
        while (stop < s.size() && u_isUWhiteSpace(static_cast<UChar32>(code_point_at(s, stop)))) {
          U8_FWD_1_UNSAFE(reinterpret_cast<const uint8_t*>(s.data()), stop);
        }
        pos = stop;
      }
      if (done < start) text(s.substr(done, start - done));
      token(hit->id);
      done = stop;
    }
    if (done < s.size()) text(s.substr(done));
  }

 private:
  std::vector<AddedToken> tokens_;  // longest first
  std::array<bool, 256> first_byte_;
};

// Code points below U+0300 are NFC and never compose with what precedes them, and only code
// points from U+0300 on have a lead byte of 0xCC or more: most text needs no ICU call at all.
bool surely_nfc(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; });
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeTokenizerParts parts) : p_(std::move(parts)) {
    if (p_.nfc) {
      UErrorCode status = U_ZERO_ERROR;
      nfc_ = icu::Normalizer2::getNFCInstance(status);
      if (U_FAILURE(status)) throw DataError(std::string("ICU's NFC normalizer is unavailable: ") + u_errorName(status));
    }
    // Normalized added tokens are looked for in normalized text, so in their normalized form.
    std::vector<AddedToken> raw, normalized;
    for (AddedToken t : p_.added) {
      if (!t.normalized) {
        raw.push_back(std::move(t));
        continue;
      }
      if (nfc_ != nullptr) {
        std::string storage;
        t.content = std::string(to_nfc(t.content, storage));
      }
      normalized.push_back(std::move(t));
    }
    raw_ = AddedTokenSplitter(std::move(raw));
    normalized_ = AddedTokenSplitter(std::move(normalized));
  }

  std::vector<int32_t> encode(std::string_view text) override {
    std::string storage;
    text = replace_invalid_utf8(text, storage);
    std::vector<int32_t> out;
    out.reserve(text.size() / 4);
    const auto token = [&](int32_t id) { out.push_back(id); };
    raw_.split(
        text,
        [&](std::string_view segment) {
          std::string nfc_storage;
          if (nfc_ != nullptr) segment = to_nfc(segment, nfc_storage);
          normalized_.split(segment, [&](std::string_view t) { encode_text(t, out); }, token);
        },
        token);
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= p_.id_text.size() || p_.id_text[static_cast<size_t>(id)].empty()) {
        throw DataError("token id " + std::to_string(id) + " is not in the vocabulary of " + p_.name);
      }
      out += p_.id_text[static_cast<size_t>(id)];
    }
    return out;
  }

  int64_t vocab_size() const override { return p_.vocab_size; }
  std::optional<int32_t> eod() const override { return p_.eod; }
  std::string name() const override { return p_.name; }
  std::optional<int32_t> token_id(std::string_view token) const override {
    if (auto it = p_.special.find(token); it != p_.special.end()) return it->second;
    return p_.model->find(token);
  }

 private:
  std::string_view to_nfc(std::string_view s, std::string& storage) const {
    if (surely_nfc(s)) return s;
    UErrorCode status = U_ZERO_ERROR;
    const icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
    if (nfc_->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return s;
    status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&storage, static_cast<int32_t>(s.size() + s.size() / 8));
    nfc_->normalizeUTF8(0, piece, sink, nullptr, status);
    if (U_FAILURE(status)) throw DataError(std::string("NFC normalization failed: ") + u_errorName(status));
    return storage;
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) {
    p_.pretokenizer.for_each_piece(text, [&](std::string_view piece) { p_.model->encode_piece(piece, out); });
  }

  BpeTokenizerParts p_;
  AddedTokenSplitter raw_, normalized_;
  const icu::Normalizer2* nfc_ = nullptr;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeTokenizerParts parts) {
  return std::make_unique<BpeTokenizer>(std::move(parts));
}

}  // namespace precon::worker
