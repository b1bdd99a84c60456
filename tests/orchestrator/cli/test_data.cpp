// `precon data prepare` as a user runs it: the shards it writes hold the texts' bytes (checked
// against the files themselves), and bad input (a missing input, half a BPE pair, no --out)
// exits 2 with a message that names it.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/orchestrator/support/cli_fixture.h"
#include "worker/data/shard.h"

namespace precon::orch::testing {
namespace {

class CliData : public CliFixture {};

std::vector<uint16_t> bytes_of(const std::string& text) {
  std::vector<uint16_t> out;
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

TEST_F(CliData, PrepareWritesTheTextsBytesIntoTrainAndValShards) {
  // Two documents, one in a subdirectory: read in path order, joined by the default "\n\n".
  fs::create_directories(dir_ / "corpus" / "more");
  std::string first, second;
  for (int i = 0; i < 20; ++i) first += "Line " + std::to_string(i) + " of the first address.\n";
  for (int i = 0; i < 15; ++i) second += "Und die zweite Rede, Zeile " + std::to_string(i) + " (\xc3\xa4\xc3\xb6).\n";
  std::ofstream(dir_ / "corpus" / "a.txt") << first;
  std::ofstream(dir_ / "corpus" / "more" / "b.txt") << second;
  std::ofstream(dir_ / "corpus" / "notes.md") << "not a .txt file: left out";

  const test::CommandResult r = precon("data prepare --input corpus --out shards --val-fraction 0.2 --seq-len 16");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<uint16_t> expected = bytes_of(first + "\n\n" + second);
  const int64_t total = static_cast<int64_t>(expected.size());
  const int64_t val = std::max<int64_t>(static_cast<int64_t>(std::ceil(0.2 * static_cast<double>(total))), 17);
  EXPECT_NE(r.output.find("wrote shards/train.bin (" + std::to_string(total - val) + " tokens) and shards/val.bin (" +
                          std::to_string(val) + " tokens), tokenizer bytes, vocab_size 256"),
            std::string::npos) << r.output;
  std::vector<uint16_t> stream = worker::read_shard(dir_ / "shards" / "train.bin");
  const std::vector<uint16_t> val_tokens = worker::read_shard(dir_ / "shards" / "val.bin");
  EXPECT_EQ(static_cast<int64_t>(val_tokens.size()), val);
  stream.insert(stream.end(), val_tokens.begin(), val_tokens.end());
  EXPECT_EQ(stream, expected);
}

TEST_F(CliData, PrepareNamesAMissingInputHalfABpePairAndNoOutput) {
  test::CommandResult r = precon("data prepare --input nowhere --out shards");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("input nowhere does not exist (expected a text or .jsonl file or a directory)"),
            std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "shards")) << "nothing is written for a missing input";

  std::ofstream(dir_ / "a.txt") << "some text\n";
  r = precon("data prepare --input a.txt --out shards --encoder encoder.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--encoder and --vocab go together"), std::string::npos) << r.output;

  r = precon("data prepare --input a.txt");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--out is required"), std::string::npos) << r.output;

  // Too little text for the sequence length: says how much there is and how much is needed.
  r = precon("data prepare --input a.txt --out shards --seq-len 64");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("corpus too small: 10 tokens from 1 files"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precon::orch::testing
