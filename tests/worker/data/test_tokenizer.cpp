// The tokenizers (worker/data/tokenizer.h): a Hugging Face tokenizer.json written here by hand
// with its ids worked out by hand, the pre-tokenizer's split behaviours against Hugging Face's
// documented example, a hand-made tiktoken rank file, the real encodings against ids js-tiktoken
// gives, round trips, and the refusals' messages. tests/interop/tokenizers_vs_tiktoken.py
// compares whole corpora against js-tiktoken.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/common/temp_dir.h"
#include "worker/common/error.h"
#include "worker/data/bpe.h"
#include "worker/data/tokenizer.h"

namespace precon::worker::tokenizer_test {
namespace {

using Ids = std::vector<int32_t>;
using json = nlohmann::json;
using test::TempDir;

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

fs::path write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// Byte-level characters (GPT-2's bytes_to_unicode): printable bytes stand for themselves; the
// others count up from U+0100 in byte order: 0x00-0x20 -> U+0100-U+0120 (so ' ' -> U+0120 'Ġ',
// '\n' -> U+010A 'Ċ'), 0x7F -> U+0121, 0x80-0xA0 -> U+0122-U+0142 (0x81 -> U+0123 'ģ').
const std::string G = "\u0120";  // ' '
const std::string C = "\u010A";  // '\n'

// A tiny byte-level BPE: single bytes, then five merges in rank order.
json tiny_tokenizer() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 13, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}| ?\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "1": 4, "2": 5, "!": 6, "Ċ": 7,
                        "ab": 8, "bc": 9, "Ġa": 10, "abc": 11, "Ġab": 12},
              "merges": ["a b", "b c", "Ġ a", "ab c", "Ġa b"]}
  })");
}

struct HfFile {
  TempDir dir;
  fs::path path = dir.path / "tokenizer.json";
  std::unique_ptr<Tokenizer> load(const json& j) {
    write(path, j.dump());
    return make_tokenizer(path.string());
  }
};

TEST(Tokenizer, HandWrittenTokenizerJson) {
  HfFile f;
  auto tok = f.load(tiny_tokenizer());
  EXPECT_EQ(tok->name(), "hf:tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 14);
  EXPECT_EQ(tok->eod(), 13);
  EXPECT_EQ(tok->token_id("<|endoftext|>"), 13);
  EXPECT_EQ(tok->token_id(" a"), 10);  // a vocabulary entry by its bytes
  // "abc": a b c; (a,b) has rank 0 -> ab c; (ab,c) rank 3 -> abc.
  EXPECT_EQ(tok->encode("abc"), (Ids{11}));
  // "bca": (b,c) rank 1 -> bc a; (bc,a) is no merge.
  EXPECT_EQ(tok->encode("bca"), (Ids{9, 0}));
  // " abc" is one piece: Ġ a b c. (a,b) rank 0 goes before (Ġ,a) rank 2 -> Ġ ab c; then (ab,c)
  // rank 3 -> Ġ abc. Merging left to right instead would give Ġab c (12 2).
  EXPECT_EQ(tok->encode(" abc"), (Ids{3, 11}));
  EXPECT_EQ(tok->encode(" ab"), (Ids{3, 8}));  // (a,b) before (Ġ,a): Ġab is never reached
  // Pieces: " abc" | "!" | <|endoftext|> (an added token, found before the regex) | "\n" | "1" | "2"
  // (\p{N} takes one digit).
  const Ids ids = tok->encode(" abc!<|endoftext|>\n12");
  EXPECT_EQ(ids, (Ids{3, 11, 6, 13, 7, 4, 5}));
  EXPECT_EQ(tok->decode(ids), " abc!<|endoftext|>\n12");
  // The added token splits a word: "a" | token | "b".
  EXPECT_EQ(tok->encode("a<|endoftext|>b"), (Ids{0, 13, 1}));
  EXPECT_EQ(tok->encode("!!"), (Ids{6, 6}));
  EXPECT_EQ(tok->encode(""), Ids{});
  std::string msg = error_of([&] { tok->encode("z"); });
  EXPECT_NE(msg.find("no token for the byte 0x7A"), std::string::npos) << msg;
  msg = error_of([&] { tok->decode(Ids{14}); });
  EXPECT_NE(msg.find("token id 14 is not in the vocabulary of hf:tokenizer.json"), std::string::npos) << msg;
}

TEST(Tokenizer, MergesAsListsAndIgnoreMerges) {
  HfFile f;
  json j = tiny_tokenizer();
  j["model"]["merges"] = json::parse(R"([["a", "b"], ["b", "c"], ["Ġ", "a"], ["ab", "c"], ["Ġa", "b"]])");
  auto tok = f.load(j);
  EXPECT_EQ(tok->encode(" abc bca ab"), (Ids{3, 11, 3, 9, 0, 3, 8}));
  // ignore_merges (Llama 3): a piece that is a whole vocabulary entry is that entry: " ab" is Ġab.
  j["model"]["ignore_merges"] = true;
  tok = f.load(j);
  EXPECT_EQ(tok->encode(" abc bca ab"), (Ids{3, 11, 3, 9, 0, 12}));
}

TEST(Tokenizer, ByteLevelPrefixSpaceAndAddedTokenFlags) {
  HfFile f;
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  j["added_tokens"] = json::array({
      {{"id", 13}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}},
      {{"id", 14}, {"content", "cc"}, {"single_word", true}, {"normalized", false}},
      {{"id", 15}, {"content", "!"}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}},
      {{"id", 16}, {"content", "<|end"}, {"normalized", false}}});
  auto tok = f.load(j);
  EXPECT_EQ(tok->vocab_size(), 17);
  // Of the added tokens that start at one place, the longest.
  EXPECT_EQ(tok->encode("<|endoftext|>"), (Ids{13}));
  EXPECT_EQ(tok->encode("<|endab"), (Ids{16, 3, 8}));
  // A prefix space for each text segment: "ab" -> " ab" = Ġ ab; after the token, "c" -> " c".
  EXPECT_EQ(tok->encode("ab<|endoftext|>c"), (Ids{3, 8, 13, 3, 2}));
  // single_word: "cc" only where no word character touches it ("acc" stays text).
  EXPECT_EQ(tok->encode("cc"), (Ids{14}));
  EXPECT_EQ(tok->encode("acc"), (Ids{10, 2, 2}));  // " acc": (Ġ,a) merges
  // lstrip/rstrip: "!" takes the spaces around it; "a" and "b" each get their prefix space.
  EXPECT_EQ(tok->encode("a  !  b"), (Ids{10, 15, 3, 1}));
}

// Hugging Face's documented example of the five behaviours (the Split pre-tokenizer's docstring,
// "the-final--countdown" split at "-").
TEST(Tokenizer, SplitBehaviours) {
  const auto split = [](SplitBehavior b, bool invert) {
    Pretokenizer p;
    p.add_split("-", true, b, invert, "test");
    std::vector<std::string> out;
    p.for_each_piece("the-final--countdown", [&](std::string_view s) { out.emplace_back(s); });
    return out;
  };
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(split(SplitBehavior::removed, false), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::isolated, false), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::merged_with_previous, false), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::merged_with_next, false), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::contiguous, false), (Pieces{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::removed, true), (Pieces{"-", "-", "-"}));  // invert: the words are removed

  Pretokenizer regex;  // a Regex pattern, where "." is any character; a String pattern is literal
  regex.add_split("a.", false, SplitBehavior::removed, false, "test");
  std::vector<std::string> out;
  regex.for_each_piece("xa.yabz", [&](std::string_view s) { out.emplace_back(s); });
  EXPECT_EQ(out, (Pieces{"x", "y", "z"}));
  // \s is Unicode White_Space: U+0085 is, U+180E and U+FEFF are not.
  Pretokenizer ws;
  ws.add_split("\\s+", false, SplitBehavior::removed, false, "test");
  out.clear();
  ws.for_each_piece("a\u0085b\u180Ec\uFEFFd e", [&](std::string_view s) { out.emplace_back(s); });
  EXPECT_EQ(out, (Pieces{"a", "b\u180Ec\uFEFFd", "e"}));
}

TEST(Tokenizer, NfcNormalizer) {
  // Byte-level entries: é is C3 A9 -> "Ã©"; e + U+0301 is 65 CC 81 -> "e", "Ì", "ģ".
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
  j["model"]["vocab"] = {{"e", 0}, {"Ì", 1}, {"ģ", 2}, {"Ã", 3}, {"©", 4}, {"Ã©", 5}, {"a", 6}};
  j["model"]["merges"] = {"Ã ©"};
  j["added_tokens"] = json::array();
  HfFile f;
  auto raw = f.load(j);
  EXPECT_EQ(raw->encode("e\u0301"), (Ids{0, 1, 2}));  // no normalizer: the decomposed bytes
  EXPECT_EQ(raw->encode("\u00E9"), (Ids{5}));
  j["normalizer"] = {{"type", "NFC"}};
  auto nfc = f.load(j);
  EXPECT_EQ(nfc->encode("e\u0301"), (Ids{5}));  // composed first
  EXPECT_EQ(nfc->encode("\u00E9a"), (Ids{5, 6}));
  EXPECT_EQ(nfc->decode(nfc->encode("ae\u0301a")), "a\u00E9a");
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  EXPECT_EQ(f.load(j)->encode("e\u0301"), (Ids{5}));
}

TEST(Tokenizer, RefusesWhatIsNotByteLevelBpe) {
  HfFile f;
  const auto refused = [&](json j) { return error_of([&] { f.load(j); }); };
  json j = tiny_tokenizer();
  j["model"]["type"] = "Unigram";
  std::string msg = refused(j);
  EXPECT_NE(msg.find("tokenizer.json: model.type is \"Unigram\": only byte-level BPE"), std::string::npos) << msg;
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(refused(j).find("model.type is \"WordPiece\""), std::string::npos);
  j = tiny_tokenizer();
  j["model"]["byte_fallback"] = true;
  msg = refused(j);
  EXPECT_NE(msg.find("model.byte_fallback is true: a sentencepiece-style BPE, not byte-level"), std::string::npos) << msg;
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
  msg = refused(j);
  EXPECT_NE(msg.find("pre_tokenizer is Metaspace: a sentencepiece-style tokenizer, not byte-level"), std::string::npos)
      << msg;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(refused(j).find("pre_tokenizer type \"Whitespace\" is not supported"), std::string::npos);
  j["pre_tokenizer"] = nullptr;
  EXPECT_NE(refused(j).find("pre_tokenizer has no ByteLevel: not a byte-level BPE"), std::string::npos);
  j = tiny_tokenizer();
  std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]);
  msg = refused(j);
  EXPECT_NE(msg.find("pre_tokenizer.pretokenizers[1] is a Split after ByteLevel"), std::string::npos) << msg;
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(refused(j).find("normalizer type \"NFKC\" is not supported"), std::string::npos);
  j = tiny_tokenizer();
  j["model"].erase("merges");
  msg = refused(j);
  EXPECT_NE(msg.find("model.merges is missing or not a list"), std::string::npos) << msg;
  j = tiny_tokenizer();
  j["model"]["merges"][3] = "ab zz";
  msg = refused(j);
  EXPECT_NE(msg.find("model.merges[3]: the merge's second symbol is not in the vocabulary"), std::string::npos) << msg;
  j["model"]["merges"][3] = "ab c d";
  EXPECT_NE(refused(j).find("model.merges[3]: expected two symbols separated by one space"), std::string::npos);
  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 7;  // a wrong type is a DataError too
  msg = refused(j);
  EXPECT_NE(msg.find("tokenizer.json: type must be string, but is number"), std::string::npos) << msg;
  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  msg = refused(j);
  EXPECT_NE(msg.find("pre_tokenizer.pretokenizers[0].pattern: the regex does not compile"), std::string::npos) << msg;

  write(f.path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"hunter2\": hunter2}}}");
  msg = error_of([&] { make_tokenizer(f.path.string()); });
  EXPECT_NE(msg.find("tokenizer.json is not valid JSON (a syntax error at byte"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;  // the file's bytes are not quoted
  msg = error_of([&] { make_tokenizer("no_such_tokenizer.json"); });
  EXPECT_NE(msg.find("unknown tokenizer \"no_such_tokenizer.json\""), std::string::npos) << msg;
}

// A hand-made rank file: "a" 0, "b" 1, " " 2, "ab" 3, " ab" 4, "aa" 5 (base64: YQ== Yg== IA== YWI=
// IGFi YWE=).
TEST(Tokenizer, HandMadeTiktokenRankFile) {
  TempDir dir;
  json ranks = {{"pat_str", " ?[a-z]+|[^a-z]"},
                {"special_tokens", {{"<|endoftext|>", 7}}},
                {"bpe_ranks", "! 0 YQ== Yg== IA==\n! 3 YWI= IGFi YWE=\n"}};
  write(dir.path / "tiny.cjs", "module.exports = " + ranks.dump() + ";");
  TokenizerOptions o;
  o.tiktoken_dir = dir.path;
  auto tok = make_tiktoken_tokenizer("tiny", o);
  EXPECT_EQ(tok->vocab_size(), 8);
  EXPECT_EQ(tok->eod(), 7);
  EXPECT_EQ(tok->encode(" ab"), (Ids{4}));  // a whole token: emitted as is
  // "abab": a b a b; "ab" (rank 3) at 0 and 2, leftmost first, then again -> ab ab.
  EXPECT_EQ(tok->encode("abab"), (Ids{3, 3}));
  // " aab": (a,a) rank 5 loses to (a,b) rank 3 -> " " a ab; " a" and "aab" are no tokens.
  EXPECT_EQ(tok->encode(" aab"), (Ids{2, 0, 3}));
  // "aaa": (a,a) at 0 and at 1 overlap with equal ranks: the leftmost merges -> aa a.
  EXPECT_EQ(tok->encode("aaa"), (Ids{5, 0}));
  EXPECT_EQ(tok->decode(Ids{4, 7, 2}), " ab<|endoftext|> ");
  std::string msg = error_of([&] { tok->decode(Ids{6}); });  // no token has id 6
  EXPECT_NE(msg.find("token id 6 is not in the vocabulary of tiny"), std::string::npos) << msg;

  ranks["bpe_ranks"] = "! 0 YQ== Y*==\n";
  write(dir.path / "tiny.cjs", "module.exports = " + ranks.dump() + ";");
  msg = error_of([&] { make_tiktoken_tokenizer("tiny", o); });
  EXPECT_NE(msg.find("tiny.cjs: bpe_ranks line 1: a token is not base64"), std::string::npos) << msg;
  write(dir.path / "tiny.cjs", "exports.x = 1;");
  msg = error_of([&] { make_tiktoken_tokenizer("tiny", o); });
  EXPECT_NE(msg.find("tiny.cjs is not a js-tiktoken rank file"), std::string::npos) << msg;
}

TEST(Tokenizer, MissingRankFileSaysWhereItLookedAndWhatToDo) {
  TempDir dir;
  TokenizerOptions o;
  o.tiktoken_dir = dir.path / "nowhere";
  ::setenv("PRECON_TIKTOKEN_DIR", (dir.path / "env").c_str(), 1);
  const std::vector<fs::path> path = tiktoken_search_path(o);
  ASSERT_GE(path.size(), 3u);
  EXPECT_EQ(path[0], dir.path / "nowhere");
  EXPECT_EQ(path[1], dir.path / "env");
  EXPECT_EQ(path[2].filename(), "tiktoken");  // <program dir>/../share/precon/tiktoken
  const std::string msg = error_of([&] { make_tiktoken_tokenizer("p99k_base", o); });
  ::unsetenv("PRECON_TIKTOKEN_DIR");
  EXPECT_NE(msg.find("tiktoken encoding p99k_base: p99k_base.cjs is in none of " + (dir.path / "nowhere").string() +
                     " (the tiktoken directory option), " + (dir.path / "env").string() + " ($PRECON_TIKTOKEN_DIR)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("set PRECON_TIKTOKEN_DIR"), std::string::npos) << msg;
}

// The real encodings, when the build fetched their rank files (PRECON_FETCH_TIKTOKEN).
std::unique_ptr<Tokenizer> encoding(const std::string& name) {
  try {
    return make_tokenizer(name);
  } catch (const DataError& e) {
    if (std::string(e.what()).find("is in none of") == std::string::npos) throw;
    return nullptr;
  }
}

// Expected ids from js-tiktoken 1.0.21 (tests/interop/tiktoken_tokens.cjs).
TEST(Tokenizer, TiktokenEncodingsMatchJsTiktoken) {
  const std::string text = "Hello world! It's 2024.\n  indented   code\tx  ";
  const std::vector<std::pair<std::string, Ids>> expected = {
      {"gpt2", {15496, 995, 0, 632, 338, 48609, 13, 198, 220, 773, 4714, 220, 220, 2438, 197, 87, 220, 220}},
      {"cl100k_base", {9906, 1917, 0, 1102, 596, 220, 2366, 19, 627, 220, 1280, 16243, 256, 2082, 10436, 256}},
      {"o200k_base", {13225, 2375, 0, 7744, 220, 1323, 19, 558, 220, 1383, 23537, 256, 3490, 21395, 256}}};
  for (const auto& [name, ids] : expected) {
    auto tok = encoding(name);
    if (!tok) GTEST_SKIP() << "no tiktoken rank files (PRECON_FETCH_TIKTOKEN=OFF?)";
    EXPECT_EQ(tok->encode(text), ids) << name;
    EXPECT_EQ(tok->encode("<|endoftext|>").size(), 7u) << name;  // plain text: <| endo ft ext |> and the like
    EXPECT_EQ(tok->eod(), (std::map<std::string, int32_t>{{"gpt2", 50256}, {"cl100k_base", 100257},
                                                           {"o200k_base", 199999}}.at(name)));
    EXPECT_EQ(tok->vocab_size(), (std::map<std::string, int64_t>{{"gpt2", 50257}, {"cl100k_base", 100277},
                                                                 {"o200k_base", 200019}}.at(name)));
    EXPECT_EQ(tok->name(), name);
  }
}

TEST(Tokenizer, RoundTrip) {
  const std::vector<std::string> texts = {
      "plain ASCII, with punctuation... and numbers 1234567890!",
      "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002 \u4e2d\u6587\u5b57\u7b26",
      "emoji \U0001F600\U0001F44D\U0001F3FD family \U0001F468\u200D\U0001F469\u200D\U0001F467 flag \U0001F1EF\U0001F1F5",
      "white   space\t\t runs \r\n\r\n\n    and\u00A0nbsp\u3000ideographic",
      "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
      std::string(3000, ' ') + "x" + std::string(2000, '=') + std::string(700, '9'),
  };
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(make_tokenizer("bytes"));
  for (const char* name : {"gpt2", "cl100k_base", "o200k_base"}) {
    if (auto tok = encoding(name)) toks.push_back(std::move(tok));
  }
  for (auto& tok : toks) {
    for (const std::string& text : texts) EXPECT_EQ(tok->decode(tok->encode(text)), text) << tok->name();
    // Invalid UTF-8: each maximal invalid subpart decodes as one U+FFFD (WHATWG).
    EXPECT_EQ(tok->decode(tok->encode("a\xC0\xAF" "b\xE6\x9D" "c\xED\xA0\x80\xF0\x9F\x98")),
              "a\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFD\uFFFD\uFFFD")
        << tok->name();
  }
}

TEST(Tokenizer, Utf8Replacement) {
  std::string storage;
  const std::string valid = "ok \xC3\xA9 \xF0\x9F\x98\x80";
  EXPECT_EQ(replace_invalid_utf8(valid, storage).data(), valid.data());  // no copy
  EXPECT_EQ(replace_invalid_utf8("\xF4\x90\x80\x80|\xE0\x80|\xF0\x90\x80", storage), "\uFFFD\uFFFD\uFFFD\uFFFD|\uFFFD\uFFFD|\uFFFD");
  EXPECT_EQ(find_invalid_utf8("0123456789abcdef\xFF"), 16u);
}

}  // namespace
}  // namespace precon::worker::tokenizer_test
