#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "worker/common/error.h"
#include "worker/data/indexed.h"
#include "worker/data/prepare.h"
#include "tests/common/temp_dir.h"

// Helpers in a namespace of their own: the unity build puts other tests' helpers beside them.
namespace precon::worker::indexed_test {
namespace {

using test::TempDir;
using Documents = std::vector<std::vector<int32_t>>;

// Little-endian encoders written out byte by byte, so the expected files do not depend on the
// host or on the code under test.
void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A dataset's two files as the format description lays them out; one sequence per document.
struct Expected {
  std::vector<uint8_t> idx, bin;
};
Expected expected_files(uint8_t code, int item, const Documents& docs) {
  Expected e;
  const char magic[] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  e.idx.assign(magic, magic + 9);
  put_le(e.idx, 1, 8);
  put_le(e.idx, code, 1);
  std::vector<uint64_t> sizes, pointers, doc_index = {0};
  uint64_t at = 0;
  for (const auto& d : docs) {
    if (!d.empty()) {
      sizes.push_back(d.size());
      pointers.push_back(at);
      at += d.size() * item;
    }
    doc_index.push_back(sizes.size());
    for (int32_t t : d) put_le(e.bin, static_cast<uint32_t>(t), item);
  }
  put_le(e.idx, sizes.size(), 8);
  put_le(e.idx, doc_index.size(), 8);
  for (uint64_t s : sizes) put_le(e.idx, s, 4);
  for (uint64_t p : pointers) put_le(e.idx, p, 8);
  for (uint64_t d : doc_index) put_le(e.idx, d, 8);
  return e;
}

std::vector<uint8_t> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b.data()), b.size());
}

void patch(const fs::path& p, size_t offset, uint64_t v, int bytes) {
  std::vector<uint8_t> b = bytes_of(p), le;
  put_le(le, v, bytes);
  std::memcpy(b.data() + offset, le.data(), le.size());
  write_bytes(p, b);
}

void write_dataset(const std::string& prefix, TokenDType dtype, const Documents& docs) {
  IndexedWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
}

std::vector<int32_t> read_all(const IndexedDataset& d, int64_t seq) {
  std::vector<int32_t> out(d.sequence_length(seq));
  d.read(seq, 0, d.sequence_length(seq), out.data());
  return out;
}

std::string data_error_of(auto&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

// The message names the file and says what is wrong, in printable text with no bytes of the file.
void expect_clean_error(const std::string& msg, const std::string& file, const std::string& reason) {
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find(reason), std::string::npos) << "expected '" << reason << "' in: " << msg;
  EXPECT_EQ(msg.find("SECRET"), std::string::npos) << "quotes the file: " << msg;
  for (char c : msg) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "unprintable byte in: " << msg;
}

// Opens the prefix (with vocab_size) expecting a DataError, and check_indexed_dataset with it.
void expect_refused(const std::string& prefix, const std::string& file, const std::string& reason, int64_t vocab = 0) {
  const std::string msg = data_error_of([&] { IndexedDataset d(prefix, vocab); });
  expect_clean_error(msg, file, reason);
  const std::string check = check_indexed_dataset(prefix, 1, vocab);
  expect_clean_error(check, file, reason);
}

const Documents kThree = {{1, 2, 3}, {300}, {7, 8}};
// Offsets in the .idx of kThree (3 sequences, 4 document index entries).
constexpr size_t kSizesAt = 34, kPointersAt = 34 + 3 * 4, kDocIndexAt = kPointersAt + 3 * 8, kIdxEnd = kDocIndexAt + 4 * 8;

TEST(IndexedLayout, MatchesTheFormatByteByByte) {
  TempDir dir;
  const Documents docs = {{1, 2, 3}, {65535}, {0, 258, 40000}};
  for (auto [dtype, code, item] : {std::tuple{TokenDType::uint16, 8, 2}, std::tuple{TokenDType::int32, 4, 4}}) {
    const std::string prefix = (dir.path / token_dtype_name(dtype)).string();
    write_dataset(prefix, dtype, docs);
    const Expected e = expected_files(static_cast<uint8_t>(code), item, docs);
    EXPECT_EQ(bytes_of(prefix + ".idx"), e.idx) << token_dtype_name(dtype);
    EXPECT_EQ(bytes_of(prefix + ".bin"), e.bin) << token_dtype_name(dtype);
    EXPECT_EQ(e.idx.size(), 34u + 3 * 12 + 4 * 8);
    EXPECT_FALSE(fs::exists(prefix + ".idx.tmp") || fs::exists(prefix + ".bin.tmp"));
  }
}

TEST(IndexedLayout, EmptyDocumentIsAnEntryWithoutSequence) {
  TempDir dir;
  const std::string prefix = (dir.path / "e").string();
  const Documents docs = {{4, 5}, {}, {6}};
  write_dataset(prefix, TokenDType::uint16, docs);
  EXPECT_EQ(bytes_of(prefix + ".idx"), expected_files(8, 2, docs).idx);
  const IndexedDataset d(prefix);
  EXPECT_EQ(d.sequences(), 2);
  EXPECT_EQ(d.documents(), 3);
  EXPECT_EQ(std::vector<int64_t>(d.document_index().begin(), d.document_index().end()), (std::vector<int64_t>{0, 1, 1, 2}));
}

TEST(IndexedLayout, OptimalDtypeIsMegatrons) {
  EXPECT_EQ(optimal_token_dtype(256), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::int32);  // Megatron's bound, not 65536
  EXPECT_EQ(optimal_token_dtype(100277), TokenDType::int32);
  EXPECT_EQ(optimal_token_dtype(0), TokenDType::int32);  // unknown, as Megatron's None
}

// Megatron documents are lists of sequences (sentences); the Python writer lays them out from
// the format description alone.
struct PythonCase {
  std::string dtype;
  std::string json;
  std::vector<std::vector<int64_t>> sequences;
  std::vector<int64_t> doc_index;
};

void python_write(const std::string& prefix, const std::string& dtype, const std::string& json) {
  std::ofstream(prefix + ".json") << json;
  const std::string cmd = std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR + "/tests/worker/data/megatron_writer.py " + prefix +
                          " " + dtype + " " + prefix + ".json";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(IndexedPython, ReaderReturnsWhatPythonWrote) {
  TempDir dir;
  const std::vector<PythonCase> cases = {
      {"int32", "[[[1, 2, 3], [4]], [], [[70000, 65536, 65535, 0]], [[]], [[2147483646, 5]]]",
       {{1, 2, 3}, {4}, {70000, 65536, 65535, 0}, {}, {2147483646, 5}}, {0, 2, 2, 3, 4, 5}},
      {"uint16", "[[[65535, 0, 1]], [[7], [8, 9]]]", {{65535, 0, 1}, {7}, {8, 9}}, {0, 1, 3}},
      {"uint8", "[[[255, 0]], [[17]]]", {{255, 0}, {17}}, {0, 1, 2}},
      {"int8", "[[[127, 3]]]", {{127, 3}}, {0, 1}},
      {"int16", "[[[32767, 1]], [[2]]]", {{32767, 1}, {2}}, {0, 1, 2}},
      {"int64", "[[[2147483646, 9]], [[1]]]", {{2147483646, 9}, {1}}, {0, 1, 2}},
  };
  for (const PythonCase& c : cases) {
    SCOPED_TRACE(c.dtype);
    const std::string prefix = (dir.path / c.dtype).string();
    python_write(prefix, c.dtype, c.json);
    const IndexedDataset d(prefix, 2147483647);
    EXPECT_STREQ(token_dtype_name(d.dtype()), c.dtype.c_str());
    ASSERT_EQ(d.sequences(), static_cast<int64_t>(c.sequences.size()));
    EXPECT_EQ(d.documents(), static_cast<int64_t>(c.doc_index.size()) - 1);
    EXPECT_EQ(std::vector<int64_t>(d.document_index().begin(), d.document_index().end()), c.doc_index);
    int64_t total = 0;
    for (size_t s = 0; s < c.sequences.size(); ++s) {
      const std::vector<int32_t> got = read_all(d, static_cast<int64_t>(s));
      EXPECT_EQ(std::vector<int64_t>(got.begin(), got.end()), c.sequences[s]) << "sequence " << s;
      total += static_cast<int64_t>(got.size());
    }
    EXPECT_EQ(d.total_tokens(), total);
    EXPECT_TRUE(is_indexed_prefix(prefix));
    EXPECT_EQ(check_indexed_dataset(prefix, total - 1, 2147483647), "");
  }
}

TEST(IndexedPython, CppWriterMatchesPythonWriter) {
  TempDir dir;
  const std::string py = (dir.path / "py").string(), cpp = (dir.path / "cpp").string();
  python_write(py, "int32", "[[[5, 70000]], [], [[1]]]");
  write_dataset(cpp, TokenDType::int32, {{5, 70000}, {}, {1}});
  EXPECT_EQ(bytes_of(py + ".idx"), bytes_of(cpp + ".idx"));
  EXPECT_EQ(bytes_of(py + ".bin"), bytes_of(cpp + ".bin"));
}

TEST(IndexedRoundTrip, BothDtypesAndPartialReads) {
  TempDir dir;
  for (TokenDType dtype : {TokenDType::uint16, TokenDType::int32}) {
    SCOPED_TRACE(token_dtype_name(dtype));
    const int32_t vocab = dtype == TokenDType::uint16 ? 50257 : 200000;
    Documents docs;
    uint64_t x = 12345;
    for (int i = 0; i < 300; ++i) {
      docs.emplace_back(static_cast<size_t>(i % 7 == 3 ? 0 : 1 + (i * 37) % 500));  // every 7th empty
      for (int32_t& t : docs.back()) t = static_cast<int32_t>((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % vocab;
    }
    const std::string prefix = (dir.path / token_dtype_name(dtype)).string();
    IndexedWriter w(prefix, dtype);
    int64_t total = 0;
    for (const auto& d : docs) {
      w.add_document(d);
      total += static_cast<int64_t>(d.size());
    }
    EXPECT_EQ(w.tokens(), total);
    EXPECT_EQ(w.documents(), 300);
    w.finish();

    const IndexedDataset d(prefix, vocab);
    EXPECT_EQ(d.dtype(), dtype);
    EXPECT_EQ(d.total_tokens(), total);
    EXPECT_EQ(d.documents(), 300);
    int64_t seq = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      ASSERT_EQ(d.document_index()[i], seq);
      if (docs[i].empty()) continue;
      ASSERT_EQ(read_all(d, seq), docs[i]) << "document " << i;
      std::vector<int32_t> part(3);
      if (docs[i].size() >= 5) {
        d.read(seq, 2, 3, part.data());
        EXPECT_EQ(part, std::vector<int32_t>(docs[i].begin() + 2, docs[i].begin() + 5));
      }
      ++seq;
    }
    EXPECT_EQ(d.sequences(), seq);
    EXPECT_EQ(d.document_index().back(), seq);
  }
}

TEST(IndexedRoundTrip, ReadOutsideASequenceIsOutOfRange) {
  TempDir dir;
  const std::string prefix = (dir.path / "r").string();
  write_dataset(prefix, TokenDType::uint16, kThree);
  const IndexedDataset d(prefix);
  int32_t out[4];
  EXPECT_THROW(d.read(3, 0, 1, out), std::out_of_range);
  EXPECT_THROW(d.read(-1, 0, 1, out), std::out_of_range);
  EXPECT_THROW(d.read(0, 2, 2, out), std::out_of_range);
  EXPECT_THROW(d.read(0, -1, 1, out), std::out_of_range);
  EXPECT_NO_THROW(d.read(0, 3, 0, out));
}

TEST(IndexedRoundTrip, WriterRefusesIdsTheDtypeCannotHold) {
  TempDir dir;
  const std::string prefix = (dir.path / "w").string();
  {
    IndexedWriter w(prefix, TokenDType::uint16);
    w.add_document(std::vector<int32_t>{1, 2});
    std::string msg = data_error_of([&] { w.add_document(std::vector<int32_t>{5, 65536}); });
    EXPECT_NE(msg.find("document 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("token 65536 at position 1 does not fit uint16"), std::string::npos) << msg;
    msg = data_error_of([&] { w.add_document(std::vector<int32_t>{-1}); });
    EXPECT_NE(msg.find("token -1 at position 0"), std::string::npos) << msg;
    EXPECT_EQ(w.documents(), 1);
    EXPECT_EQ(w.tokens(), 2);
    // Not finished: the temp file goes, nothing is left that looks like a dataset.
  }
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(prefix + ".idx") || fs::exists(prefix + ".bin"));
  EXPECT_FALSE(is_indexed_prefix(prefix));
  EXPECT_NE(data_error_of([&] { IndexedWriter w(prefix, TokenDType::float32); }).find("float32"), std::string::npos);
}

TEST(IndexedRoundTrip, RewritingAPrefixReplacesBothFiles) {
  TempDir dir;
  const std::string prefix = (dir.path / "again").string();
  write_dataset(prefix, TokenDType::int32, {{1, 2, 3, 4}});
  write_dataset(prefix, TokenDType::uint16, {{9}});
  const IndexedDataset d(prefix);
  EXPECT_EQ(d.dtype(), TokenDType::uint16);
  EXPECT_EQ(read_all(d, 0), std::vector<int32_t>{9});
}

TEST(IndexedBadInput, TruncatedIndex) {
  TempDir dir;
  const std::string prefix = (dir.path / "t").string(), idx = prefix + ".idx";
  write_dataset(prefix, TokenDType::uint16, kThree);
  const std::vector<uint8_t> whole = bytes_of(idx);
  const std::vector<std::pair<size_t, std::string>> cuts = {
      {0, "empty or truncated"},       {5, "empty or truncated"},      {9, "truncated inside its header"},
      {33, "truncated inside its header"}, {34, "ends inside the sizes"}, {kSizesAt + 6, "ends inside the sizes"},
      {kPointersAt + 3, "ends inside the pointers"}, {kDocIndexAt + 5, "ends inside the document index"},
      {kIdxEnd - 1, "ends inside the document index"}};
  for (const auto& [cut, reason] : cuts) {
    SCOPED_TRACE(cut);
    write_bytes(idx, std::vector<uint8_t>(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut)));
    expect_refused(prefix, idx, reason);
  }
}

TEST(IndexedBadInput, BinDisagreesWithPointers) {
  TempDir dir;
  const std::string prefix = (dir.path / "p").string(), idx = prefix + ".idx", bin = prefix + ".bin";
  write_dataset(prefix, TokenDType::uint16, kThree);  // sequences at bytes 0, 6, 8; .bin is 12 bytes
  patch(idx, kPointersAt + 2 * 8, 1000, 8);
  expect_refused(prefix, bin, "sequence 2 (2 tokens) runs past the end of");
  patch(idx, kPointersAt + 2 * 8, 6, 8);
  expect_refused(prefix, idx, "sequence 2 does not start where sequence 1 ends (byte 8");
  patch(idx, kPointersAt + 2 * 8, 8, 8);
  fs::resize_file(bin, 10);
  expect_refused(prefix, bin, "runs past the end of");
  fs::resize_file(bin, 14);
  expect_refused(prefix, bin, "has 2 bytes after the last sequence");
  fs::resize_file(bin, 12);
  EXPECT_NO_THROW(IndexedDataset d(prefix));
  patch(idx, kSizesAt + 4, 0xffffffff, 4);
  expect_refused(prefix, idx, "gives sequence 1 a negative size");
}

TEST(IndexedBadInput, DtypeCodes) {
  TempDir dir;
  const std::string prefix = (dir.path / "c").string(), idx = prefix + ".idx";
  write_dataset(prefix, TokenDType::uint16, kThree);
  for (uint64_t code : {0, 9, 200}) {
    patch(idx, 17, code, 1);
    expect_refused(prefix, idx, "dtype code " + std::to_string(code) + ", not one of Megatron's");
  }
  patch(idx, 17, 7, 1);
  expect_refused(prefix, idx, "dtype code 7 (float32): its values are not token ids");
  patch(idx, 17, 6, 1);
  expect_refused(prefix, idx, "dtype code 6 (float64)");
}

TEST(IndexedBadInput, MagicAndVersion) {
  TempDir dir;
  const std::string prefix = (dir.path / "m").string(), idx = prefix + ".idx";
  write_dataset(prefix, TokenDType::uint16, kThree);
  std::vector<uint8_t> b = bytes_of(idx);
  std::memcpy(b.data(), "SECRETXYZ", 9);
  write_bytes(idx, b);
  expect_refused(prefix, idx, "is not a Megatron indexed-dataset index");
  EXPECT_FALSE(is_indexed_prefix(prefix));
  std::memcpy(b.data(), "TNTIDX\0\0\0", 9);  // fairseq's older, non-mmap index
  write_bytes(idx, b);
  expect_refused(prefix, idx, "does not start with the magic MMIDIDX");
  write_dataset(prefix, TokenDType::uint16, kThree);
  EXPECT_TRUE(is_indexed_prefix(prefix));
  patch(idx, 9, 2, 8);
  expect_refused(prefix, idx, "has version 2, expected 1");
}

TEST(IndexedBadInput, TokensOutsideTheVocab) {
  TempDir dir;
  const std::string prefix = (dir.path / "v").string();
  write_dataset(prefix, TokenDType::uint16, kThree);
  EXPECT_NO_THROW(IndexedDataset d(prefix, 301));
  expect_refused(prefix, prefix + ".bin", "has token 300 in sequence 1 at position 0 (token 3 of the file), outside the model's vocab_size 300", 300);
  // A negative id can only come from another writer: patch one into an int32 dataset.
  write_dataset(prefix, TokenDType::int32, kThree);
  patch(prefix + ".bin", 4 * 5, static_cast<uint32_t>(-5), 4);  // sequence 2, position 1
  expect_refused(prefix, prefix + ".bin", "has token -5 in sequence 2 at position 1 (token 5 of the file), a negative id", 1000);
}

TEST(IndexedBadInput, Int64TokenOutsideInt32) {
  TempDir dir;
  const std::string prefix = (dir.path / "w").string();
  python_write(prefix, "int64", "[[[1, 4294967296]]]");
  expect_refused(prefix, prefix + ".bin", "has token 4294967296 in sequence 0 at position 1", 50257);
  const IndexedDataset d(prefix);  // no vocab_size: nothing scanned, read() still refuses it
  int32_t out[2];
  const std::string msg = data_error_of([&] { d.read(0, 0, 2, out); });
  EXPECT_NE(msg.find("token outside int32 in sequence 0 at position 1"), std::string::npos) << msg;
}

TEST(IndexedBadInput, MissingFiles) {
  TempDir dir;
  const std::string prefix = (dir.path / "gone").string();
  expect_refused(prefix, prefix + ".idx", "does not exist");
  EXPECT_FALSE(is_indexed_prefix(prefix));
  write_dataset(prefix, TokenDType::uint16, kThree);
  fs::remove(prefix + ".bin");
  expect_refused(prefix, prefix + ".bin", "does not exist");
}

TEST(IndexedBadInput, DocumentIndex) {
  TempDir dir;
  const std::string prefix = (dir.path / "d").string(), idx = prefix + ".idx";
  write_dataset(prefix, TokenDType::uint16, kThree);  // document index 0 1 2 3
  patch(idx, kDocIndexAt + 16, 0, 8);                  // 0 1 0 3
  expect_refused(prefix, idx, "document index entry 2 breaks the rule");
  patch(idx, kDocIndexAt + 16, 2, 8);
  patch(idx, kDocIndexAt, 1, 8);  // does not start at 0
  expect_refused(prefix, idx, "document index entry 0");
  patch(idx, kDocIndexAt, 0, 8);
  patch(idx, kDocIndexAt + 24, 2, 8);  // does not end at the sequence count
  expect_refused(prefix, idx, "document index entry 3");
}

TEST(IndexedBadInput, TrailingBytesInIndex) {
  TempDir dir;
  const std::string prefix = (dir.path / "x").string(), idx = prefix + ".idx";
  write_dataset(prefix, TokenDType::uint16, kThree);
  std::vector<uint8_t> b = bytes_of(idx);
  b.insert(b.end(), {0, 1, 0});  // one mode per sequence, as Megatron's multimodal builder appends
  write_bytes(idx, b);
  expect_refused(prefix, idx, "sequence modes of a multimodal dataset");
  b.push_back(0);
  write_bytes(idx, b);
  expect_refused(prefix, idx, "has 4 bytes after its document index");
}

TEST(IndexedCheck, TooFewTokensAndSampling) {
  TempDir dir;
  const std::string prefix = (dir.path / "s").string();
  write_dataset(prefix, TokenDType::uint16, kThree);  // 6 tokens
  EXPECT_EQ(check_indexed_dataset(prefix, 5, 301), "");
  expect_clean_error(check_indexed_dataset(prefix, 6, 301), prefix, "has 6 tokens, fewer than seq_len + 1 = 7");

  // A corpus of 4 samples' stride: a bad token at a sampled position is found, one between
  // samples is the trainer's to find (the check never reads the whole .bin).
  const int64_t n = 4 * kTokenSample;
  std::vector<int32_t> tokens(static_cast<size_t>(n), 1);
  tokens[8] = 999;
  write_dataset(prefix, TokenDType::uint16, {tokens});
  expect_clean_error(check_indexed_dataset(prefix, 1024, 500), prefix + ".bin", "token 999 in sequence 0 at position 8");
  tokens[8] = 1;
  tokens[9] = 999;
  write_dataset(prefix, TokenDType::uint16, {tokens});
  EXPECT_EQ(check_indexed_dataset(prefix, 1024, 500), "");
  EXPECT_EQ(check_indexed_dataset(prefix, 1024, 0), "");
  EXPECT_NE(data_error_of([&] { IndexedDataset d(prefix, 500); }).find("position 9"), std::string::npos);
}

}  // namespace
}  // namespace precon::worker::indexed_test
