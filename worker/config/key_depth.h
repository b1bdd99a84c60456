// A guard run over recipe text before toml++ sees it: toml++ limits how deeply values nest but
// not how many dotted segments a key or table header has, and it recurses once per segment, so
// `[a.a.a…]` with tens of thousands of segments overflows the stack (and costs time quadratic
// in the segments below that). Thread-safe (no state).
#pragma once

#include <string>

namespace precon::worker {

// The most dotted segments a key or table header may have. Recipe keys have at most four
// (optimizer.muon.coefficient_list under [sweep.parameters] is the deepest), so this leaves room.
constexpr int kMaxKeySegments = 16;

// Throws ConfigError(source, line, key, …) for the first key or table header in `text` with more
// than kMaxKeySegments dotted segments (line 0 when !with_lines: a --set value has none).
// Strings and comments are skipped; the scan is linear.
void check_key_depth(const std::string& text, const std::string& source, bool with_lines = true);

}  // namespace precon::worker
