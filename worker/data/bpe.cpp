#include "worker/data/bpe.h"

#include <algorithm>
#include <climits>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/json_error.h"

namespace precon::worker {

namespace {

struct Range {
  char32_t lo, hi;
};

// Unicode White_Space, which is what \s matches in the regex engine GPT-2 used.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// \p{L} and \p{N}, generated from the Unicode Character Database.
#include "worker/data/unicode_classes.inc"

template <size_t N>
bool in_ranges(const Range (&ranges)[N], char32_t c) {
  const Range* r = std::upper_bound(ranges, ranges + N, c, [](char32_t x, const Range& range) { return x < range.lo; });
  return r != ranges && c <= (r - 1)->hi;
}

bool is_letter(char32_t c) { return c < 0x80 ? ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') : in_ranges(kLetters, c); }
bool is_number(char32_t c) { return c < 0x80 ? (c >= '0' && c <= '9') : in_ranges(kNumbers, c); }

// Decodes one code point at s[i]; returns its length, 0 when invalid.
size_t decode(std::string_view s, size_t i, char32_t* out) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n;
  char32_t cp, min;
  if (c < 0x80) {
    *out = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  *out = cp;
  return n;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

enum class Kind { space, letter, number, other };

Kind kind_of(char32_t c) {
  if (is_space(c)) return Kind::space;
  if (is_letter(c)) return Kind::letter;
  if (is_number(c)) return Kind::number;
  return Kind::other;
}

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  char32_t cp;
  for (size_t i = 0; i < text.size();) {
    size_t n = decode(text, i, &cp);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  // Decode once: code point kinds and their byte offsets (offset[n] = text.size()).
  std::vector<Kind> kind;
  std::vector<size_t> offset;
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0xFFFD;
    size_t n = decode(text, i, &cp);
    if (n == 0) n = 1;  // callers validate; a stray byte just counts as "other"
    kind.push_back(kind_of(cp));
    offset.push_back(i);
    i += n;
  }
  offset.push_back(text.size());
  const size_t n = kind.size();
  auto at = [&](size_t i) { return text[offset[i]]; };
  auto run = [&](size_t i, Kind k) {
    while (i < n && kind[i] == k) ++i;
    return i;
  };

  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < n;) {
    size_t end = i;
    if (at(i) == '\'' && i + 1 < n) {  // contractions, case-sensitive as in GPT-2
      const std::string_view rest = text.substr(offset[i + 1], 2);
      if (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll")) {
        end = i + 3;
      } else if (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd') {
        end = i + 2;
      }
    }
    if (end == i) {
      // An optional literal space binds to a following letter/number/other run.
      const size_t j = (at(i) == ' ' && i + 1 < n && kind[i + 1] != Kind::space) ? i + 1 : i;
      if (kind[j] != Kind::space) {
        end = run(j, kind[j]);
        // [^\s\p{L}\p{N}]+ is one class, so "other" runs are maximal as computed.
      } else {
        // \s+(?!\S): a whitespace run, less its last character when text follows, so that
        // the last one can lead the next piece; a lone space before text falls to \s+.
        const size_t ws_end = run(i, Kind::space);
        end = (ws_end < n && ws_end - i > 1) ? ws_end - 1 : ws_end;
      }
    }
    pieces.push_back(text.substr(offset[i], offset[end] - offset[i]));
    i = end;
  }
  return pieces;
}

Gpt2Bpe::Gpt2Bpe(const fs::path& encoder_json, const fs::path& vocab_bpe) : encoder_path_(encoder_json) {
  // bytes_to_unicode: printable bytes map to themselves, the rest to 256, 257, ... in order.
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    append_utf8(byte_symbol_[static_cast<size_t>(b)], printable ? static_cast<char32_t>(b) : next++);
  }

  std::vector<uint8_t> raw = read_file(encoder_json);
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(raw.begin(), raw.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw DataError("GPT-2 encoder " + encoder_json.string() + " is not valid JSON (" + json_error_text(e) + ")");
  }
  if (!enc.is_object() || enc.empty()) throw DataError("GPT-2 encoder " + encoder_json.string() + " is not a {token: id} object");
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() > 65535) {
      throw DataError("GPT-2 encoder " + encoder_json.string() + ": id of \"" + it.key() +
                      "\" must be an integer in [0, 65535] to fit uint16 shards");
    }
    const int32_t id = it.value().get<int32_t>();
    encoder_[it.key()] = id;
    vocab_size_ = std::max<int64_t>(vocab_size_, id + 1);
  }

  raw = read_file(vocab_bpe);
  std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  int32_t rank = 0;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      throw DataError("GPT-2 merges " + vocab_bpe.string() + " line " + std::to_string(line_no) +
                      ": expected two symbols separated by one space");
    }
    ranks_.emplace(std::string(line), rank++);
  }
}

std::optional<int32_t> Gpt2Bpe::token_id(const std::string& token) const {
  auto it = encoder_.find(token);
  if (it == encoder_.end()) return std::nullopt;
  return it->second;
}

const std::vector<int32_t>& Gpt2Bpe::encode_piece(std::string_view piece) {
  std::string key(piece);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;

  std::vector<std::string> sym;
  for (unsigned char c : piece) sym.push_back(byte_symbol_[c]);
  std::string pair;
  while (sym.size() > 1) {
    int32_t best = INT32_MAX;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      pair.assign(sym[i]).append(" ").append(sym[i + 1]);
      if (auto r = ranks_.find(pair); r != ranks_.end() && r->second < best) best = r->second, best_i = i;
    }
    if (best == INT32_MAX) break;
    // Merge every non-overlapping occurrence of the best pair, left to right.
    const std::string a = sym[best_i], b = sym[best_i + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
        merged.push_back(a + b);
        ++i;
      } else {
        merged.push_back(std::move(sym[i]));
      }
    }
    sym = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& s : sym) {
    auto it = encoder_.find(s);
    if (it == encoder_.end()) {
      throw DataError("GPT-2 BPE produced the symbol \"" + s + "\" which " + encoder_path_.string() +
                      " does not list: encoder.json and vocab.bpe do not belong together");
    }
    ids.push_back(it->second);
  }
  return cache_.emplace(std::move(key), std::move(ids)).first->second;
}

std::vector<int32_t> Gpt2Bpe::encode(std::string_view text) {
  std::vector<int32_t> out;
  for (std::string_view piece : gpt2_pretokenize(text)) {
    const std::vector<int32_t>& ids = encode_piece(piece);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace precon::worker
