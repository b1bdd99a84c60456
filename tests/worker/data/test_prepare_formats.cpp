// `data prepare` beyond llm.c bytes: Megatron's indexed format (whole documents, EOD appended,
// read back by the reader), JSON Lines input, uint32 llm.c shards for a vocabulary past 65,536,
// and the inputs it refuses with the file and line.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/common/temp_dir.h"
#include "worker/common/error.h"
#include "worker/data/indexed.h"
#include "worker/data/prepare.h"
#include "worker/data/shard.h"
#include "worker/data/tokenizer.h"

namespace precon::worker {
namespace {

using test::TempDir;

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string prepare_refusal(auto&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

std::vector<int32_t> sequence(const IndexedDataset& d, int64_t i) {
  std::vector<int32_t> out(static_cast<size_t>(d.sequence_length(i)));
  d.read(i, 0, d.sequence_length(i), out.data());
  return out;
}

// Documents from a .jsonl file and a .txt file, GPT-2's BPE, one Megatron sequence per document
// ending in <|endoftext|>; the last documents are val. The reference ids come from the tokenizer
// run on each document alone.
TEST(PrepareFormats, MegatronWholeDocumentsWithEodFromJsonlAndText) {
  TempDir dir;
  std::vector<std::string> docs;
  std::string jsonl;
  for (int i = 0; i < 12; ++i) {
    docs.push_back("Document " + std::to_string(i) + ": the state of the union is strong, caf\u00e9 \u6f22\u5b57 " +
                   std::string(static_cast<size_t>(20 + i * 7), 'x'));
    jsonl += nlohmann::json{{"id", i}, {"content", docs.back()}}.dump() + "\n";
    if (i == 4) jsonl += "\n";  // blank lines are skipped
  }
  write_text(dir.path / "in" / "a.jsonl", jsonl);
  write_text(dir.path / "in" / "b.txt", "A last plain text document.");
  docs.push_back("A last plain text document.");

  PrepareOptions o;
  o.inputs = {dir.path / "in"};
  o.out_dir = dir.path / "out";
  o.tokenizer = "gpt2";
  o.format = "megatron";
  o.append_eod = true;
  o.json_key = "content";
  o.seq_len = 8;
  o.val_fraction = 0.2;
  const PrepareResult r = prepare_data(o);
  EXPECT_EQ(r.documents, 13);
  EXPECT_EQ(r.tokenizer, "gpt2");
  EXPECT_EQ(r.vocab_size, 50257);

  std::unique_ptr<Tokenizer> tok = make_tokenizer("gpt2");
  const IndexedDataset train(r.train_path.string(), 50257), val(r.val_path.string(), 50257);
  EXPECT_EQ(train.dtype(), TokenDType::uint16);
  ASSERT_EQ(train.sequences() + val.sequences(), 13);
  EXPECT_GE(val.sequences(), 1);
  EXPECT_GE(val.total_tokens(), static_cast<int64_t>(0.2 * static_cast<double>(r.train_tokens + r.val_tokens)));
  for (int64_t i = 0; i < 13; ++i) {
    std::vector<int32_t> want = tok->encode(docs[static_cast<size_t>(i)]);
    want.push_back(50256);  // <|endoftext|>
    const bool in_train = i < train.sequences();
    EXPECT_EQ(sequence(in_train ? train : val, in_train ? i : i - train.sequences()), want) << i;
  }
  EXPECT_EQ(train.total_tokens(), r.train_tokens);
  EXPECT_EQ(val.total_tokens(), r.val_tokens);
  const auto meta = nlohmann::json::parse(std::ifstream(r.meta_path));
  EXPECT_EQ(meta["format"], "megatron");
  EXPECT_EQ(meta["eod"], 50256);
  EXPECT_EQ(meta["documents"], 13);
}

// cl100k_base's ids pass 65,535: the llm.c shards are the uint32 kind, and hold the stream exactly.
TEST(PrepareFormats, LlmcShardsWidenPastVocab65536) {
  TempDir dir;
  const std::string a = "Emoji and CJK: \U0001F600\U0001F44D\U0001F3FD \u4f60\u597d\u4e16\u754c, code: for (i = 0; i < n; ++i) {}";
  const std::string b = "Second document, with numbers 1234567 and spaces    here.";
  write_text(dir.path / "in" / "a.txt", a);
  write_text(dir.path / "in" / "b.txt", b);
  PrepareOptions o;
  o.inputs = {dir.path / "in"};
  o.out_dir = dir.path / "out";
  o.tokenizer = "cl100k_base";
  o.seq_len = 4;
  o.val_fraction = 0.3;
  const PrepareResult r = prepare_data(o);
  EXPECT_EQ(r.vocab_size, 100277);
  std::unique_ptr<Tokenizer> tok = make_tokenizer("cl100k_base");
  std::vector<int32_t> want = tok->encode(a);
  want.push_back(*tok->eod());  // between documents: the EOD token
  for (int32_t t : tok->encode(b)) want.push_back(t);
  std::vector<int32_t> got = read_shard_tokens(r.train_path, r.vocab_size);
  for (int32_t t : read_shard_tokens(r.val_path, r.vocab_size)) got.push_back(t);
  EXPECT_EQ(got, want);
  EXPECT_GT(*std::max_element(got.begin(), got.end()), 65535);
  EXPECT_EQ(Shard(r.train_path).token_bytes(), 4);
}

TEST(PrepareFormats, RefusalsNameTheFileAndLine) {
  TempDir dir;
  write_text(dir.path / "bad.jsonl", "{\"text\": \"fine\"}\n{\"body\": \"no text key\"}\n");
  PrepareOptions o;
  o.inputs = {dir.path / "bad.jsonl"};
  o.out_dir = dir.path / "out";
  o.seq_len = 2;
  std::string m = prepare_refusal([&] { prepare_data(o); });
  EXPECT_NE(m.find("bad.jsonl line 2 has no string \"text\""), std::string::npos) << m;

  write_text(dir.path / "broken.jsonl", "{\"text\": \"fine\"}\n{\"text\": oops}\n");
  o.inputs = {dir.path / "broken.jsonl"};
  m = prepare_refusal([&] { prepare_data(o); });
  EXPECT_NE(m.find("broken.jsonl line 2 is not JSON"), std::string::npos) << m;

  write_text(dir.path / "latin.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xE9\"}\n");
  o.inputs = {dir.path / "latin.jsonl"};
  m = prepare_refusal([&] { prepare_data(o); });
  EXPECT_NE(m.find("latin.jsonl line 2 is not valid UTF-8"), std::string::npos) << m;

  write_text(dir.path / "ok.txt", std::string(200, 'a'));
  o.inputs = {dir.path / "ok.txt"};
  o.append_eod = true;  // bytes have no end-of-document token
  m = prepare_refusal([&] { prepare_data(o); });
  EXPECT_NE(m.find("has no end-of-document token"), std::string::npos) << m;

  o.append_eod = false;
  o.format = "parquet";
  m = prepare_refusal([&] { prepare_data(o); });
  EXPECT_NE(m.find("format must be"), std::string::npos) << m;

  // One document cannot be split into train and val by whole documents.
  o.format = "megatron";
  m = prepare_refusal([&] { prepare_data(o); });
  EXPECT_NE(m.find("by whole documents"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir.path / "out" / "train_text_document.idx"));
}

}  // namespace
}  // namespace precon::worker
