// The pre-tokenizer: PCRE2 regex splits with Hugging Face's delimiter behaviours.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "worker/common/error.h"
#include "worker/data/bpe.h"

namespace precon::worker {

namespace {

// `\s` and `\S` as Unicode White_Space, which is what they mean in the engines the patterns were
// written for (Python's regex, Rust's regex in tiktoken, Oniguruma in Hugging Face's tokenizers);
// PCRE2's UCP \s adds U+180E, and JavaScript's drops U+0085 and adds U+FEFF.
std::string white_space_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char e = pattern[++i];
    if (e == 's') {
      out += "\\p{White_Space}";
    } else if (e == 'S') {
      out += "\\P{White_Space}";
    } else if (e == 'Q') {  // \Q...\E is literal text
      const size_t end = pattern.find("\\E", i + 1);
      const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out.append(pattern.substr(i - 1, stop - (i - 1)));
      i = stop - 1;
    } else {
      out += '\\';
      out += e;
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

// One compiled pattern with its match data; find() is not reentrant.
class SplitRegex {
 public:
  SplitRegex(std::string_view pattern, bool literal, const std::string& where) : where_(where) {
    const std::string source = literal ? std::string(pattern) : white_space_classes(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error, &offset, nullptr);
    if (code_ == nullptr) {
      throw DataError(where + ": the regex does not compile (" + pcre2_message(error) + " at character " +
                      std::to_string(offset) + ")");
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // without JIT support pcre2_match interprets
    match_ = pcre2_match_data_create_from_pattern(code_, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    stack_ = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (match_ == nullptr || context_ == nullptr || stack_ == nullptr) throw std::bad_alloc();
    pcre2_jit_stack_assign(context_, nullptr, stack_);
  }
  ~SplitRegex() {
    pcre2_jit_stack_free(stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(match_);
    pcre2_code_free(code_);
  }
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // The first non-empty match at or after `from`: true and [*start, *end).
  bool find(std::string_view text, size_t from, size_t* start, size_t* end) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                               PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY, match_, context_);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      throw DataError(where_ + ": the regex failed on a piece of " + std::to_string(text.size()) + " bytes (" +
                      pcre2_message(rc) + ")");
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_);
    *start = ovector[0];
    *end = ovector[1];
    return true;
  }

 private:
  std::string where_;
  pcre2_code* code_ = nullptr;
  pcre2_match_data* match_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
};

struct Pretokenizer::Step {
  std::unique_ptr<SplitRegex> regex;  // null: the prefix space
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
};

Pretokenizer::Pretokenizer() = default;
Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

void Pretokenizer::add_split(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert,
                             const std::string& where) {
  steps_.push_back({std::make_unique<SplitRegex>(pattern, literal, where), behavior, invert});
}

void Pretokenizer::add_prefix_space() { steps_.push_back({}); }

bool Pretokenizer::empty() const { return steps_.empty(); }

void Pretokenizer::for_each_piece(std::string_view text, const std::function<void(std::string_view)>& emit) {
  run(0, text, emit);
}

void Pretokenizer::run(size_t step, std::string_view text, const std::function<void(std::string_view)>& emit) {
  if (text.empty()) return;
  if (step == steps_.size()) {
    emit(text);
    return;
  }
  Step& s = steps_[step];
  if (!s.regex) {
    if (text.front() == ' ') {
      run(step + 1, text, emit);
    } else {
      std::string prefixed;
      prefixed.reserve(text.size() + 1);
      prefixed.append(" ").append(text);
      run(step + 1, prefixed, emit);
    }
    return;
  }

  // The text alternates non-matches and matches; each span goes through the behaviour, which
  // needs at most the span before it (Hugging Face's folds, run forwards).
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::optional<Span> pending;
  bool previous_match = false;
  const auto out = [&](size_t begin, size_t end) { run(step + 1, text.substr(begin, end - begin), emit); };
  const auto flush = [&] {
    if (pending) out(pending->begin, pending->end);
    pending.reset();
  };
  const auto push = [&](Span span) {
    switch (s.behavior) {
      case SplitBehavior::isolated:
        out(span.begin, span.end);
        break;
      case SplitBehavior::removed:
        if (!span.match) out(span.begin, span.end);
        break;
      case SplitBehavior::contiguous:
        if (span.match == previous_match && pending) {
          pending->end = span.end;
        } else {
          flush();
          pending = span;
        }
        break;
      case SplitBehavior::merged_with_previous:
        if (span.match && !previous_match && pending) {
          pending->end = span.end;
        } else {
          flush();
          pending = span;
        }
        break;
      case SplitBehavior::merged_with_next:
        if (pending && pending->match && !span.match) {
          out(pending->begin, span.end);
          pending.reset();
        } else {
          flush();
          pending = span;
        }
        break;
    }
    previous_match = span.match;
  };

  size_t done = 0, start = 0, end = 0;
  while (done < text.size() && s.regex->find(text, done, &start, &end)) {
    if (done < start) push({done, start, s.invert});
    push({start, end, !s.invert});
    done = end;
  }
  if (done < text.size()) push({done, text.size(), s.invert});
  flush();
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  if (auto bad = find_invalid_utf8(text)) {
    throw DataError("GPT-2's pre-tokenizer needs valid UTF-8 (a bad byte at offset " + std::to_string(*bad) + ")");
  }
  thread_local Pretokenizer gpt2 = [] {
    Pretokenizer p;
    p.add_split(kGpt2Pattern, false, SplitBehavior::isolated, false, "GPT-2's pattern");
    return p;
  }();
  std::vector<std::string_view> pieces;
  gpt2.for_each_piece(text, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

}  // namespace precon::worker
