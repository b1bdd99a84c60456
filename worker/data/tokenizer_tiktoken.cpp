// tiktoken's encodings from js-tiktoken's rank files: ranks/<name>.cjs holds
//   module.exports = {"pat_str": REGEX, "special_tokens": {TEXT: ID}, "bpe_ranks": LINES, ...};
// where each line of bpe_ranks is "! OFFSET TOKEN TOKEN ...": base64 token bytes whose ranks
// (= ids) are OFFSET, OFFSET + 1, ...
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/json_error.h"
#include "worker/data/bpe.h"

#ifndef PRECON_TIKTOKEN_BUILD_DIR
#define PRECON_TIKTOKEN_BUILD_DIR ""
#endif

namespace precon::worker {

namespace {

constexpr int64_t kMaxRank = int64_t{1} << 26;  // far past any encoding; bounds the tables a bad file asks for

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view s) {
  while (!s.empty() && s.back() == '=') s.remove_suffix(1);
  std::string out;
  uint32_t bits = 0;
  int n = 0;
  for (char c : s) {
    const int v = base64_value(c);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    n += 6;
    if (n >= 8) {
      n -= 8;
      out += static_cast<char>((bits >> n) & 0xFF);
    }
  }
  return out;
}

fs::path program_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

std::vector<std::pair<fs::path, std::string>> labelled_search_path(const TokenizerOptions& options) {
  std::vector<std::pair<fs::path, std::string>> dirs;
  if (!options.tiktoken_dir.empty()) dirs.emplace_back(options.tiktoken_dir, "the tiktoken directory option");
  if (const char* env = std::getenv("PRECON_TIKTOKEN_DIR"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env, "$PRECON_TIKTOKEN_DIR");
  }
  if (const fs::path dir = program_dir(); !dir.empty()) {
    dirs.emplace_back((dir / ".." / "share" / "precon" / "tiktoken").lexically_normal(), "beside the program");
  }
  if (*PRECON_TIKTOKEN_BUILD_DIR != '\0') dirs.emplace_back(PRECON_TIKTOKEN_BUILD_DIR, "the build tree");
  return dirs;
}

fs::path find_rank_file(const std::string& encoding, const TokenizerOptions& options) {
  const std::string file = encoding + ".cjs";
  std::string looked;
  for (const auto& [dir, label] : labelled_search_path(options)) {
    std::error_code ec;
    if (fs::is_regular_file(dir / file, ec)) return dir / file;
    looked += (looked.empty() ? "" : ", ") + dir.string() + " (" + label + ")";
  }
  throw DataError("tiktoken encoding " + encoding + ": " + file + " is in none of " +
                  (looked.empty() ? std::string("the directories searched (none configured)") : looked) +
                  ". The build fetches js-tiktoken's rank files into <build>/share/precon/tiktoken (target "
                  "tiktoken_ranks, which needs the npm registry); or copy dist/ranks/" + file +
                  " of the npm package js-tiktoken 1.0.21 into a directory and set PRECON_TIKTOKEN_DIR to it");
}

}  // namespace

std::vector<fs::path> tiktoken_search_path(const TokenizerOptions& options) {
  std::vector<fs::path> dirs;
  for (auto& [dir, label] : labelled_search_path(options)) dirs.push_back(std::move(dir));
  return dirs;
}

namespace {

std::unique_ptr<Tokenizer> load_rank_file(const std::string& encoding, const fs::path& path, const std::string& where) {
  const std::vector<uint8_t> raw = read_file(path);
  const std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  const size_t open = text.find('{'), close = text.rfind('}');
  if (!text.starts_with("module.exports") || open == std::string_view::npos || close == std::string_view::npos ||
      close < open) {
    throw DataError(where + " is not a js-tiktoken rank file (expected module.exports = {...})");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.substr(open, close + 1 - open));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(where + ": the object is not valid JSON (" + json_error_text(e) + ")");
  }
  for (const char* key : {"pat_str", "bpe_ranks"}) {
    if (!j.contains(key) || !j[key].is_string()) throw DataError(where + ": \"" + key + "\" is missing or not a string");
  }
  if (!j.contains("special_tokens") || !j["special_tokens"].is_object()) {
    throw DataError(where + ": \"special_tokens\" is missing or not an object");
  }

  std::vector<std::string> token_bytes;
  const std::string& lines = j["bpe_ranks"].get_ref<const std::string&>();
  size_t line_no = 0;
  for (size_t pos = 0; pos < lines.size();) {
    size_t eol = lines.find('\n', pos);
    if (eol == std::string::npos) eol = lines.size();
    const std::string_view line(lines.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.empty()) continue;
    const std::string bad = where + ": bpe_ranks line " + std::to_string(line_no);
    size_t field_end = line.find(' ');
    size_t next = field_end == std::string_view::npos ? line.size() : field_end + 1;
    field_end = line.find(' ', next);
    if (field_end == std::string_view::npos) field_end = line.size();
    int64_t rank = 0;
    const std::string_view offset = line.substr(next, field_end - next);
    if (offset.empty() || offset.size() > 9 || offset.find_first_not_of("0123456789") != std::string_view::npos) {
      throw DataError(bad + ": expected \"! OFFSET TOKEN...\" with a decimal offset");
    }
    rank = std::stoll(std::string(offset));
    for (next = field_end + 1; next < line.size(); next = field_end + 1, ++rank) {
      field_end = line.find(' ', next);
      if (field_end == std::string_view::npos) field_end = line.size();
      std::optional<std::string> bytes = base64_decode(line.substr(next, field_end - next));
      if (!bytes || bytes->empty()) throw DataError(bad + ": a token is not base64 of one or more bytes");
      if (rank >= kMaxRank) throw DataError(bad + ": a rank past " + std::to_string(kMaxRank));
      if (token_bytes.size() <= static_cast<size_t>(rank)) token_bytes.resize(static_cast<size_t>(rank) + 1);
      token_bytes[static_cast<size_t>(rank)] = std::move(*bytes);
    }
  }
  if (token_bytes.empty()) throw DataError(where + ": bpe_ranks lists no token");

  BpeTokenizerParts parts;
  parts.name = encoding;
  parts.id_text = token_bytes;
  for (const auto& [content, id] : j["special_tokens"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= static_cast<uint64_t>(kMaxRank)) {
      throw DataError(where + ": special_tokens: an id is not an integer in [0, 2^26)");
    }
    const auto n = id.get<size_t>();
    if (parts.id_text.size() <= n) parts.id_text.resize(n + 1);
    parts.id_text[n] = content;
    parts.special.insert_or_assign(content, static_cast<int32_t>(n));
  }
  parts.vocab_size = static_cast<int64_t>(parts.id_text.size());
  if (auto it = parts.special.find("<|endoftext|>"); it != parts.special.end()) parts.eod = it->second;
  parts.pretokenizer.add_split(j["pat_str"].get<std::string>(), false, SplitBehavior::isolated, false,
                               where + ": pat_str");
  const std::vector<BpeMerge> merges = BpeModel::merges_from_ranks(token_bytes);
  parts.model = std::make_unique<BpeModel>(std::move(token_bytes), merges, true,
                                           " in " + where + ", which should list all 256");
  return make_bpe_tokenizer(std::move(parts));
}

}  // namespace

std::unique_ptr<Tokenizer> make_tiktoken_tokenizer(const std::string& encoding, const TokenizerOptions& options) {
  const fs::path path = find_rank_file(encoding, options);
  const std::string where = "tiktoken rank file " + path.string();
  try {
    return load_rank_file(encoding, path, where);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong type where the reader did not check
    throw DataError(where + ": " + json_error_text(e));
  }
}

}  // namespace precon::worker
