#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <numeric>

#include "worker/common/error.h"
#include "worker/data/shard.h"
#include "tests/common/temp_dir.h"

namespace precon::worker {
namespace {

using test::TempDir;

std::string data_error_of(auto&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

TEST(Shard, RoundTripReadAndMap) {
  TempDir dir;
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50257);
  write_shard(dir.path / "a.bin", tokens);

  EXPECT_EQ(fs::file_size(dir.path / "a.bin"), 1024 + 2 * tokens.size());
  EXPECT_EQ(read_shard(dir.path / "a.bin", 50257), tokens);
  Shard mapped(dir.path / "a.bin", 50257);
  ASSERT_EQ(mapped.size(), 1000);
  for (int64_t i = 0; i < mapped.size(); ++i) ASSERT_EQ(mapped.at(i), tokens[static_cast<size_t>(i)]) << i;
}

// llm.c's Llama 3 kind: magic 20240801, version 7, uint32 tokens, for vocabularies past 65,536.
TEST(Shard, Uint32KindIsLlmcLayoutAndHoldsLargeIds) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {0, 65535, 65536, 128255, 199999};
  write_shard(dir.path / "w.bin", tokens);
  EXPECT_EQ(fs::file_size(dir.path / "w.bin"), 1024 + 4 * tokens.size());
  std::ifstream in(dir.path / "w.bin", std::ios::binary);
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 5);
  uint32_t body[5];
  in.read(reinterpret_cast<char*>(body), sizeof body);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), body));
  EXPECT_EQ(read_shard_tokens(dir.path / "w.bin", 200000), std::vector<int32_t>(tokens.begin(), tokens.end()));
  try {
    read_shard_tokens(dir.path / "w.bin", 128256);
    FAIL() << "a token past vocab_size was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("token 199999 at position 4"), std::string::npos) << e.what();
  }
  try {
    read_shard(dir.path / "w.bin");
    FAIL() << "read_shard read uint32 tokens as uint16";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("uint32"), std::string::npos) << e.what();
  }
}

TEST(Shard, HeaderIsLlmcLayout) {
  TempDir dir;
  std::vector<uint16_t> tokens = {1, 2, 3};
  write_shard(dir.path / "a.bin", tokens);
  std::ifstream in(dir.path / "a.bin", std::ios::binary);
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < 256; ++i) ASSERT_EQ(header[i], 0) << i;
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  write_shard(dir.path / "e.bin", std::vector<uint16_t>{});
  EXPECT_TRUE(read_shard(dir.path / "e.bin").empty());
  EXPECT_EQ(Shard(dir.path / "e.bin").size(), 0);
}

TEST(Shard, WrongMagicNamesFileAndTool) {
  TempDir dir;
  fs::path p = dir.path / "foreign.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 12345;
  header[1] = 1;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<char*>(header.data()), 1024);
  std::string msg = data_error_of([&] { read_shard(p); });
  EXPECT_NE(msg.find("foreign.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic 20240520"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("12345"), std::string::npos) << "the file's own bytes are quoted: " << msg;
  EXPECT_NE(msg.find("different tool"), std::string::npos) << msg;
  EXPECT_EQ(data_error_of([&] { Shard s(p); }), msg);
}

TEST(Shard, WrongVersionIsRejected) {
  TempDir dir;
  fs::path p = dir.path / "v2.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = kShardMagic;
  header[1] = 2;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_NE(data_error_of([&] { read_shard(p); }).find("version 2, expected 1"), std::string::npos);
}

TEST(Shard, TruncatedFileSaysHowMuchIsMissing) {
  TempDir dir;
  fs::path p = dir.path / "t.bin";
  write_shard(p, std::vector<uint16_t>(100, 5));
  fs::resize_file(p, 1024 + 150);
  std::string msg = data_error_of([&] { Shard s(p); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 150 bytes"), std::string::npos) << msg;

  fs::resize_file(p, 10);
  msg = data_error_of([&] { read_shard(p); });
  EXPECT_NE(msg.find("too short for its header"), std::string::npos) << msg;
}

TEST(Shard, TokenOutsideVocabNamesPosition) {
  TempDir dir;
  fs::path p = dir.path / "v.bin";
  std::vector<uint16_t> tokens(50, 10);
  tokens[37] = 300;
  write_shard(p, tokens);
  EXPECT_NO_THROW(read_shard(p, 301));
  std::string msg = data_error_of([&] { Shard s(p, 256); });
  EXPECT_NE(msg.find("token 300 at position 37"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab_size 256"), std::string::npos) << msg;
}

TEST(Shard, MissingFileIsIoError) {
  EXPECT_THROW(read_shard("/nonexistent/precon/x.bin"), IoError);
  EXPECT_THROW(Shard("/nonexistent/precon/x.bin"), IoError);
}

}  // namespace
}  // namespace precon::worker
