#include "worker/config/key_depth.h"

#include <algorithm>
#include <string>

#include "worker/config/parse.h"

namespace precon::worker {

namespace {

bool bare_key_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// The key shown in the error: the run of key text from `begin`, cut short (the whole run may be
// 80 KB of "a.a.a").
std::string shown_key(const std::string& text, size_t begin, size_t end) {
  constexpr size_t kMaxShown = 60;
  std::string key = text.substr(begin, std::min(end - begin, kMaxShown));
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
  return end - begin > kMaxShown ? key + "…" : key;
}

// Skips a string starting at text[i] (a quote); returns the index past it and counts newlines
// inside multi-line strings. An unterminated single-line string ends at the line's end, where
// toml++ reports it.
size_t skip_string(const std::string& text, size_t i, int& line) {
  const char quote = text[i];
  const bool multi = text.compare(i, 3, std::string(3, quote)) == 0;
  i += multi ? 3 : 1;
  while (i < text.size()) {
    const char c = text[i];
    if (quote == '"' && c == '\\') {
      if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
      i += 2;
      continue;
    }
    if (c == '\n') {
      if (!multi) return i;
      ++line;
    }
    if (c == quote && (!multi || text.compare(i, 3, std::string(3, quote)) == 0)) return i + (multi ? 3 : 1);
    ++i;
  }
  return i;
}

}  // namespace

// A dotted key is a run of bare words, quoted strings, blanks and dots; anything else (=, [, ],
// {, }, comma, newline, #) ends it. Values never have more than one dot outside a string (a
// float, a time), so counting the dots in each run counts a key's segments and nothing else
// reaches the limit.
void check_key_depth(const std::string& text, const std::string& source, bool with_lines) {
  int line = 1, run_line = 1, dots = 0;
  size_t run_begin = 0;
  bool in_run = false;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      if (!in_run) in_run = true, run_begin = i, run_line = line, dots = 0;
      i = skip_string(text, i, line);
      continue;
    }
    if (c == '.') {
      if (!in_run) in_run = true, run_begin = i, run_line = line, dots = 0;
      if (++dots >= kMaxKeySegments)
        throw ConfigError(source, with_lines ? run_line : 0, shown_key(text, run_begin, text.find_first_of("=]\n", i)),
                          "has more than " + std::to_string(kMaxKeySegments) +
                              " dotted segments: no recipe key has that many");
    } else if (bare_key_char(c)) {
      if (!in_run) in_run = true, run_begin = i, run_line = line, dots = 0;
    } else if (c != ' ' && c != '\t') {
      in_run = false;
      if (c == '\n') ++line;
      if (c == '#') {
        while (i < text.size() && text[i] != '\n') ++i;
        continue;
      }
    }
    ++i;
  }
}

}  // namespace precon::worker
