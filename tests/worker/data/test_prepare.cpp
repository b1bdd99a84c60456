#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/data/bpe.h"
#include "worker/data/prepare.h"
#include "worker/data/shard.h"
#include "tests/common/temp_dir.h"

namespace precon::worker {
namespace {

using test::TempDir;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::vector<uint16_t> bytes_of(const std::string& s) {
  std::vector<uint16_t> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

std::string data_error(auto&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

TEST(Prepare, ByteTokenizerSortedSourcesSplitAndMeta) {
  TempDir dir;
  const std::string a = "The first document, long enough to matter.";
  const std::string b = "Second one: caf\xC3\xA9.";
  const std::string c = "Third.";
  put(dir.path / "corpus" / "b" / "doc.txt", b);
  put(dir.path / "corpus" / "a.txt", a);
  put(dir.path / "corpus" / "b" / "skip.md", "not text");
  put(dir.path / "corpus" / "empty.txt", "");
  put(dir.path / "extra.txt", "\xEF\xBB\xBF" + c);  // BOM dropped

  PrepareOptions o;
  o.inputs = {dir.path / "corpus", dir.path / "extra.txt"};
  o.out_dir = dir.path / "out";
  o.seq_len = 8;
  o.val_fraction = 0.25;
  PrepareResult r = prepare_data(o);

  ASSERT_EQ(r.sources.size(), 4u);
  EXPECT_EQ(r.sources[0].filename(), "a.txt");
  EXPECT_EQ(r.sources[1].filename(), "doc.txt");
  EXPECT_EQ(r.sources[2].filename(), "empty.txt");
  EXPECT_EQ(r.sources[3].filename(), "extra.txt");

  std::vector<uint16_t> all = bytes_of(a + "\n\n" + b + "\n\n" + c);
  std::vector<uint16_t> train = read_shard(r.train_path, 256), val = read_shard(r.val_path, 256);
  EXPECT_EQ(static_cast<int64_t>(val.size()), (static_cast<int64_t>(all.size()) + 3) / 4);  // ceil(0.25 N)
  train.insert(train.end(), val.begin(), val.end());
  EXPECT_EQ(train, all);

  nlohmann::json meta = nlohmann::json::parse(std::ifstream(r.meta_path));
  EXPECT_EQ(meta["tokenizer"], "bytes");
  EXPECT_EQ(meta["vocab_size"], 256);
  EXPECT_EQ(meta["train_tokens"], r.train_tokens);
  EXPECT_EQ(meta["val_tokens"], r.val_tokens);
  EXPECT_EQ(meta["total_tokens"], all.size());
  EXPECT_EQ(meta["documents"], 3);
  EXPECT_EQ(meta["separator"], "\n\n");
  EXPECT_EQ(meta["sources"].size(), 4u);
}

TEST(Prepare, ValGetsAtLeastOneWindowAndSmallCorpusFails) {
  TempDir dir;
  put(dir.path / "t.txt", std::string(100, 'x'));
  PrepareOptions o;
  o.inputs = {dir.path / "t.txt"};
  o.out_dir = dir.path / "out";
  o.seq_len = 20;
  o.val_fraction = 0.01;
  PrepareResult r = prepare_data(o);
  EXPECT_EQ(r.val_tokens, 21);
  EXPECT_EQ(r.train_tokens, 79);

  o.seq_len = 50;
  std::string msg = data_error([&] { prepare_data(o); });
  EXPECT_NE(msg.find("corpus too small: 100 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("seq_len + 1 = 51"), std::string::npos) << msg;
}

TEST(Prepare, BadInputsAreClearErrors) {
  TempDir dir;
  PrepareOptions o;
  o.out_dir = dir.path / "out";
  o.seq_len = 2;
  o.inputs = {dir.path / "missing"};
  EXPECT_NE(data_error([&] { prepare_data(o); }).find("missing does not exist"), std::string::npos);

  fs::create_directories(dir.path / "empty_dir");
  o.inputs = {dir.path / "empty_dir"};
  EXPECT_NE(data_error([&] { prepare_data(o); }).find("no text files"), std::string::npos);

  put(dir.path / "latin1.txt", "ok so far \xE9t\xE9");
  o.inputs = {dir.path / "latin1.txt"};
  std::string msg = data_error([&] { prepare_data(o); });
  EXPECT_NE(msg.find("latin1.txt is not valid UTF-8 (first bad byte at offset 10)"), std::string::npos) << msg;

  o.val_fraction = 1.0;
  EXPECT_NE(data_error([&] { prepare_data(o); }).find("val_fraction"), std::string::npos);
  o.val_fraction = 0.1;
  o.encoder_json = dir.path / "encoder.json";
  EXPECT_NE(data_error([&] { prepare_data(o); }).find("needs both"), std::string::npos);
}

TEST(Bpe, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("plain \xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("ab\xC0\xAF"), 2u);          // overlong '/'
  EXPECT_EQ(find_invalid_utf8("a\xED\xA0\x80"), 1u);       // surrogate
  EXPECT_EQ(find_invalid_utf8("abc\xE6\x9D"), 3u);         // truncated sequence
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);
}

using Pieces = std::vector<std::string>;
Pieces pieces(std::string_view text) {
  Pieces out;
  for (std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

// Expected splits were checked against GPT-2's regex (Python `regex` module).
TEST(Bpe, PretokenizeMatchesGpt2Pattern) {
  EXPECT_EQ(pieces("Hello world's 123  test\n\nfoo"),
            (Pieces{"Hello", " world", "'s", " 123", " ", " test", "\n", "\n", "foo"}));
  EXPECT_EQ(pieces("don't stop!!  "), (Pieces{"don", "'t", " stop", "!!", "  "}));
  EXPECT_EQ(pieces("we're I'M they'll 've"), (Pieces{"we", "'re", " I", "'", "M", " they", "'ll", " '", "ve"}));
  EXPECT_EQ(pieces("abc123def 4.5"), (Pieces{"abc", "123", "def", " 4", ".", "5"}));
  EXPECT_EQ(pieces("  \tx \n y"), (Pieces{"  ", "\t", "x", " \n", " y"}));
  EXPECT_EQ(pieces("caf\xC3\xA9 \xC3\xBC" "ber \xE6\x9D\xB1\xE4\xBA\xAC \xC2\xBD"),
            (Pieces{"caf\xC3\xA9", " \xC3\xBC" "ber", " \xE6\x9D\xB1\xE4\xBA\xAC", " \xC2\xBD"}));
  EXPECT_EQ(pieces("a\xC2\xA0" "b"), (Pieces{"a", "\xC2\xA0", "b"}));  // NBSP is \s, not ' '
  // Letters and digits outside the common blocks: U+0559 (Lm), Adlam U+1E900/1 (Lu), Tibetan
  // digits U+0F20/1 (Nd); split by JavaScript's /\p{L}/u regex with GPT-2's pattern.
  EXPECT_EQ(pieces("x\xD5\x99's \xF0\x9E\xA4\x80\xF0\x9E\xA4\x81" "9 \xE0\xBC\xA0\xE0\xBC\xA1"),
            (Pieces{"x\xD5\x99", "'s", " \xF0\x9E\xA4\x80\xF0\x9E\xA4\x81", "9", " \xE0\xBC\xA0\xE0\xBC\xA1"}));
  EXPECT_EQ(pieces(""), Pieces{});
  std::string text = "x  'll\r\n\r\n  ...?! 9";
  std::string joined;
  for (const std::string& p : pieces(text)) joined += p;
  EXPECT_EQ(joined, text);
}

// A tiny hand-made vocabulary: single symbols, then merges that build "hello" and " wor".
struct TinyBpe {
  TempDir dir;
  fs::path encoder = dir.path / "encoder.json";
  fs::path vocab = dir.path / "vocab.bpe";
  const std::string G = "\xC4\xA0";  // 'Ġ' = bytes_to_unicode(' ')
  const std::string C = "\xC4\x8A";  // 'Ċ' = bytes_to_unicode('\n')
  TinyBpe() {
    nlohmann::json enc = {{"h", 0},    {"e", 1},     {"l", 2},      {"o", 3},         {G, 4},     {"w", 5},
                          {"r", 6},    {"d", 7},     {"ll", 8},     {"he", 9},        {"hell", 10}, {"hello", 11},
                          {G + "w", 12}, {"or", 13}, {G + "wor", 14}, {C, 15}, {"<|endoftext|>", 20}};
    std::ofstream(encoder) << enc.dump();
    std::ofstream(vocab) << "#version: 0.2\nl l\nh e\nhe ll\nhell o\n" << G << " w\no r\n" << G << "w or\n";
  }
};

TEST(Bpe, EncodesByRankWithTinyVocabulary) {
  TinyBpe t;
  Gpt2Bpe bpe(t.encoder, t.vocab);
  EXPECT_EQ(bpe.vocab_size(), 21);
  EXPECT_EQ(bpe.token_id("<|endoftext|>"), 20);
  EXPECT_EQ(bpe.encode("hello"), (std::vector<int32_t>{11}));
  EXPECT_EQ(bpe.encode("hello hello world\n"), (std::vector<int32_t>{11, 4, 11, 14, 2, 7, 15}));
  EXPECT_EQ(bpe.encode("llll"), (std::vector<int32_t>{8, 8}));  // every occurrence merges
  EXPECT_EQ(bpe.encode("lll"), (std::vector<int32_t>{8, 2}));   // left to right
  std::string msg = data_error([&] { bpe.encode("z"); });
  EXPECT_NE(msg.find("do not belong together"), std::string::npos) << msg;

  // The files' bytes are not quoted, only where the fault is (issue 28, item 5).
  std::ofstream(t.vocab) << "#version: 0.2\nl l hunter2\n";
  msg = data_error([&] { Gpt2Bpe b(t.encoder, t.vocab); });
  EXPECT_NE(msg.find("line 2: expected two symbols separated by one space"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;

  std::ofstream(t.encoder) << "{\"h\": 1e999}";  // a number past double: a DataError, not an escaped exception
  msg = data_error([&] { Gpt2Bpe b(t.encoder, t.vocab); });
  EXPECT_NE(msg.find("not valid JSON (a number out of range)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("1e999"), std::string::npos) << msg;
  std::ofstream(t.encoder) << "{\"hunter2\": hunter2}";
  msg = data_error([&] { Gpt2Bpe b(t.encoder, t.vocab); });
  EXPECT_NE(msg.find("not valid JSON (a syntax error at byte 13)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;
}

TEST(Prepare, Gpt2BpeUsesEndOfTextBetweenDocuments) {
  TinyBpe t;
  put(t.dir.path / "in" / "1.txt", "hello world");
  put(t.dir.path / "in" / "2.txt", "hello hello");
  PrepareOptions o;
  o.inputs = {t.dir.path / "in"};
  o.out_dir = t.dir.path / "out";
  o.seq_len = 2;
  o.val_fraction = 0.3;
  o.encoder_json = t.encoder;
  o.vocab_bpe = t.vocab;
  PrepareResult r = prepare_data(o);
  EXPECT_EQ(r.tokenizer, "gpt2-bpe");
  EXPECT_EQ(r.vocab_size, 21);
  std::vector<uint16_t> all = read_shard(r.train_path, 21), val = read_shard(r.val_path, 21);
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(all, (std::vector<uint16_t>{11, 14, 2, 7, 20, 11, 4, 11}));
  EXPECT_EQ(r.val_tokens, 3);
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(r.meta_path));
  EXPECT_EQ(meta["separator"], "<|endoftext|>");
  EXPECT_EQ(meta["encoder"], t.encoder.string());
}

}  // namespace
}  // namespace precon::worker
