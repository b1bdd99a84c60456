#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kernels/tensor.h"
#include "worker/ckpt/safetensors.h"
#include "worker/common/error.h"
#include "tests/common/temp_dir.h"

namespace precon::worker {
namespace {

using test::TempDir;

// Runs a command and returns its stdout; fails the test on a non-zero exit.
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  EXPECT_EQ(rc, 0) << cmd;
  return out;
}

std::string python_check(const std::string& args) {
  return run(std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR + "/tests/worker/ckpt/safetensors_check.py " + args);
}

template <typename T>
std::vector<T> values_of(const SafetensorsTensor& t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.bytes.data(), t.bytes.size());  // data may be unaligned
  return v;
}

std::string safetensors_error_of(auto&& fn) {
  try {
    fn();
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "(no SafetensorsError)";
}

// A mixed set of tensors, given in an order that the writer must re-lay for alignment.
struct Sample {
  std::vector<uint8_t> u8 = {7, 0, 255};
  std::vector<float> f32 = std::vector<float>(12);
  std::vector<kernels::bf16> b16;
  std::vector<int32_t> i32 = {-5, 6, 7, 1 << 30};
  std::vector<int64_t> i64 = {-1, int64_t(1) << 40};
  float scalar = -0.75f;
  std::vector<SafetensorsEntry> entries;
  SafetensorsMetadata metadata = {{"format", "pt"}, {"step", "1200"}};

  Sample() {
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = 0.5f * static_cast<float>(i) - 2.0f;
    for (float x : {1.0f, -3.0f, 0.25f, 8.0f}) b16.push_back(kernels::float_to_bf16(x));
    entries = {{"u8.flags", SafetensorsDType::U8, {3}, u8.data()},
               {"h.0.attn.c_attn.weight", SafetensorsDType::F32, {3, 4}, f32.data()},
               {"wte.bf16", SafetensorsDType::BF16, {2, 2}, b16.data()},
               {"idx", SafetensorsDType::I32, {4}, i32.data()},
               {"step", SafetensorsDType::I64, {2}, i64.data()},
               {"scale", SafetensorsDType::F32, {}, &scalar},
               {"empty", SafetensorsDType::F32, {0, 5}, nullptr}};
  }
};

TEST(Safetensors, RoundTripInMemoryAndAligned) {
  Sample s;
  std::vector<uint8_t> bytes = safetensors_bytes(s.entries, s.metadata);
  uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ((8 + len) % 8, 0u);
  SafetensorsFile f = SafetensorsFile::parse(bytes, "mem");
  EXPECT_EQ(f.metadata(), s.metadata);
  ASSERT_EQ(f.tensors().size(), s.entries.size());
  for (const SafetensorsEntry& e : s.entries) {
    const SafetensorsTensor& t = f.at(e.name);
    EXPECT_EQ(t.dtype, e.dtype) << e.name;
    EXPECT_EQ(t.shape, e.shape) << e.name;
    ASSERT_EQ(t.bytes.size(), static_cast<size_t>(t.numel()) * safetensors_dtype_size(e.dtype)) << e.name;
    if (!t.bytes.empty()) {
      EXPECT_EQ(std::memcmp(t.bytes.data(), e.data, t.bytes.size()), 0) << e.name;
    }
    // The data section starts 8-aligned; larger elements first keeps every tensor aligned.
    EXPECT_EQ((8 + len + static_cast<size_t>(t.bytes.data() - f.tensors()[0].bytes.data())) %
                  safetensors_dtype_size(t.dtype),
              0u)
        << e.name;
  }
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_NE(safetensors_error_of([&] { f.at("nope"); }).find("no tensor \"nope\""), std::string::npos);
}

TEST(Safetensors, PythonReadsOursAndWritesOneWeRead) {
  TempDir dir;
  Sample s;
  write_safetensors(dir.path / "ours.safetensors", s.entries, s.metadata);
  std::string out = python_check("roundtrip " + (dir.path / "ours.safetensors").string() + " " +
                                 (dir.path / "theirs.safetensors").string());
  nlohmann::json summary = nlohmann::json::parse(out);
  EXPECT_EQ(summary["metadata"]["step"], "1200");
  EXPECT_EQ(summary["tensors"]["h.0.attn.c_attn.weight"]["shape"], nlohmann::json({3, 4}));
  EXPECT_DOUBLE_EQ(summary["tensors"]["h.0.attn.c_attn.weight"]["sum"].get<double>(),
                   std::accumulate(s.f32.begin(), s.f32.end(), 0.0));
  EXPECT_DOUBLE_EQ(summary["tensors"]["wte.bf16"]["sum"].get<double>(), 1.0 - 3.0 + 0.25 + 8.0);
  EXPECT_DOUBLE_EQ(summary["tensors"]["step"]["values"][1].get<double>(), std::ldexp(1.0, 40));
  EXPECT_DOUBLE_EQ(summary["tensors"]["scale"]["sum"].get<double>(), -0.75);
  EXPECT_EQ(summary["tensors"]["empty"]["shape"], nlohmann::json({0, 5}));
  EXPECT_DOUBLE_EQ(summary["tensors"]["u8.flags"]["sum"].get<double>(), 262.0);

  SafetensorsFile back = SafetensorsFile::open(dir.path / "theirs.safetensors");
  EXPECT_EQ(back.metadata().at("python"), "roundtrip");
  EXPECT_EQ(back.metadata().at("format"), "pt");
  ASSERT_EQ(back.tensors().size(), s.entries.size());
  for (const SafetensorsEntry& e : s.entries) {
    const SafetensorsTensor& t = back.at(e.name);
    EXPECT_EQ(t.dtype, e.dtype) << e.name;
    EXPECT_EQ(t.shape, e.shape) << e.name;
    if (!t.bytes.empty()) {
      EXPECT_EQ(std::memcmp(t.bytes.data(), e.data, t.bytes.size()), 0) << e.name;
    }
  }
}

TEST(Safetensors, ReadsPythonFileWithUnusualLayout) {
  TempDir dir;
  python_check("make " + (dir.path / "py.safetensors").string());
  SafetensorsFile f = SafetensorsFile::open(dir.path / "py.safetensors");
  EXPECT_EQ(f.metadata(), (SafetensorsMetadata{{"format", "pt"}, {"note", "written by python"}}));
  ASSERT_EQ(f.tensors().size(), 7u);
  EXPECT_EQ(f.tensors()[0].name, "u.bytes");  // data order, not key order
  EXPECT_EQ(values_of<uint8_t>(f.at("u.bytes")), (std::vector<uint8_t>{0, 1, 2, 254, 255}));
  EXPECT_EQ(f.at("z.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of<float>(f.at("z.weight")), (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f}));
  EXPECT_EQ(f.at("m.empty").numel(), 0);
  std::vector<kernels::bf16> half = values_of<kernels::bf16>(f.at("b.half"));
  ASSERT_EQ(half.size(), 3u);
  EXPECT_EQ(kernels::bf16_to_float(half[1]), -2.0f);
  EXPECT_EQ(values_of<int64_t>(f.at("a.bias")), (std::vector<int64_t>{-1, int64_t(1) << 40}));
  EXPECT_TRUE(f.at("s.scalar").shape.empty());
  EXPECT_EQ(values_of<float>(f.at("s.scalar")), std::vector<float>{3.25f});
  EXPECT_EQ(values_of<int32_t>(f.at("i.idx")), (std::vector<int32_t>{1, -2, 3, -4}));
}

// Builds a file from a raw header and data section, for the validation tests.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

TEST(Safetensors, ValidationNamesFileAndTensor) {
  auto err = [](const std::string& header, size_t data) {
    return safetensors_error_of([&] { SafetensorsFile::parse(raw_file(header, data), "x.safetensors"); });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos && msg.find("x.safetensors") != std::string::npos;
  };
  std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::parse(raw_file(ok, 8), "x"));

  EXPECT_TRUE(has(err(ok, 4), "outside the data section")) << err(ok, 4);
  EXPECT_TRUE(has(err(ok, 12), "trailing bytes")) << err(ok, 12);
  EXPECT_TRUE(has(err("{not json", 0), "not valid JSON"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,8]}})", 8), "not valid JSON"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,4]}})", 4),
                  "tensor \"a\": dtype \"Q4\" is not a safetensors dtype (BOOL, U8, I8"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12 bytes"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "negative"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                      6),
                  "overlaps"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4), "(gap)"));
  EXPECT_TRUE(has(err(R"({"__metadata__":{"k":1}})", 0), "not a string"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"U8","shape":[2]}})", 2), "tensor \"a\""));

  std::vector<uint8_t> huge = raw_file("{}", 0);
  uint64_t len = uint64_t(1) << 40;
  std::memcpy(huge.data(), &len, 8);
  EXPECT_NE(safetensors_error_of([&] { SafetensorsFile::parse(huge, "x"); }).find("does not fit the file"), std::string::npos);
  EXPECT_NE(safetensors_error_of([&] { SafetensorsFile::parse({1, 2, 3}, "x"); }).find("not even a header length"),
            std::string::npos);
}

// Reasons reach logs and the API that anyone may read, and train.init_from can name any file the
// trainer can read: what is wrong is said without the file's bytes (issue 28, item 5).
TEST(Safetensors, ErrorsQuoteNoBytesOfTheFile) {
  // A text file: its first 8 bytes, read as the header length, are "root:$6$" (2609312867587944306).
  std::string shadow;
  while (shadow.size() < 696) shadow += "root:$6$Zm9vYmFy$c2VjcmV0aGFzaA:19000:0:99999:7:::\n";
  shadow.resize(696);
  uint64_t first8 = 0;
  std::memcpy(&first8, shadow.data(), 8);
  std::string msg = safetensors_error_of(
      [&] { SafetensorsFile::parse(std::vector<uint8_t>(shadow.begin(), shadow.end()), "/etc/shadow"); });
  EXPECT_NE(msg.find("safetensors file /etc/shadow: not a safetensors file (or a truncated one): its header length "
                     "does not fit the file (696 bytes)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find(std::to_string(first8)), std::string::npos) << msg;

  // A length that fits, then text that is not JSON: nlohmann's messages quote what they last read
  // (a string up to the error, a number that overflows).
  for (const std::string& header : {std::string(R"({"password": "hunter2-secret)"),
                                    std::string("{\"password\": \"hunter2-secret\n\"}"),
                                    std::string(R"({"a": hunter2-secret})"), std::string(R"({"a": 1e99999})")}) {
    msg = safetensors_error_of([&] { SafetensorsFile::parse(raw_file(header, 0), "x.safetensors"); });
    EXPECT_NE(msg.find("safetensors file x.safetensors: not a safetensors file: its header is not valid JSON ("),
              std::string::npos)
        << msg;
    for (const char* secret : {"hunter2", "secret", "1e99999", "password"})
      EXPECT_EQ(msg.find(secret), std::string::npos) << "quotes \"" << secret << "\": " << msg;
  }
  msg = safetensors_error_of([&] { SafetensorsFile::parse(raw_file(R"({"a": hunter2})", 0), "x.safetensors"); });
  EXPECT_NE(msg.find("(a syntax error at byte 7)"), std::string::npos) << msg;
  msg = safetensors_error_of([&] { SafetensorsFile::parse(raw_file(R"({"a": 1e99999})", 0), "x.safetensors"); });
  EXPECT_NE(msg.find("(a number out of range)"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedFileOnDiskIsRejected) {
  TempDir dir;
  Sample s;
  fs::path p = dir.path / "m.safetensors";
  write_safetensors(p, s.entries, s.metadata);
  fs::resize_file(p, fs::file_size(p) - 3);
  std::string msg = safetensors_error_of([&] { SafetensorsFile::open(p); });
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_THROW(SafetensorsFile::open(dir.path / "missing.safetensors"), IoError);
}

TEST(Safetensors, WriterRejectsBadEntries) {
  float x = 1;
  std::vector<SafetensorsEntry> dup = {{"a", SafetensorsDType::F32, {}, &x}, {"a", SafetensorsDType::F32, {}, &x}};
  EXPECT_THROW(safetensors_bytes(dup), SafetensorsError);
  std::vector<SafetensorsEntry> meta = {{"__metadata__", SafetensorsDType::F32, {}, &x}};
  EXPECT_THROW(safetensors_bytes(meta), SafetensorsError);
  std::vector<SafetensorsEntry> null = {{"a", SafetensorsDType::F32, {2}, nullptr}};
  EXPECT_THROW(safetensors_bytes(null), SafetensorsError);
}

// Interop with tests/interop/safetensors_torch.py, a reader and writer written from the format's
// documentation with torch.frombuffer. It exits 77 without PyTorch: skipped, except under CI.
struct TorchScript {
  std::string out;
  bool skipped = false;
  TorchScript(const std::string& args) {
    const std::string cmd = std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR +
                            "/tests/interop/safetensors_torch.py " + args;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) {
      ADD_FAILURE() << "cannot run " << cmd;
      return;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    skipped = WIFEXITED(rc) && WEXITSTATUS(rc) == 77;
    if (!skipped) {
      EXPECT_EQ(rc, 0) << cmd;
    }
  }
};

std::vector<float> f32_of(const SafetensorsTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  safetensors_to_f32(t, v);
  return v;
}

std::vector<std::string> names_in_data_order(const SafetensorsFile& f) {
  std::vector<std::string> out;
  for (const SafetensorsTensor& t : f.tensors()) out.push_back(t.name);
  return out;
}

TEST(Safetensors, ReadsTorchWrittenEdgeCases) {
  TempDir dir;
  TorchScript w("write " + dir.path.string());
  if (w.skipped) GTEST_SKIP() << "PyTorch is missing";
  auto open = [&](const char* name) { return SafetensorsFile::open(dir.path / name); };

  SafetensorsFile none = open("no_metadata.safetensors");  // no __metadata__ key at all
  EXPECT_TRUE(none.metadata().empty());
  EXPECT_EQ(f32_of(none.at("w")), (std::vector<float>{-1, -0.5f, 0, 0.5f, 1, 1.5f}));
  EXPECT_EQ(values_of<int64_t>(none.at("i")), (std::vector<int64_t>{-(int64_t(1) << 40), 0, 7}));

  SafetensorsFile empty_meta = open("empty_metadata.safetensors");  // "__metadata__": {}
  EXPECT_TRUE(empty_meta.metadata().empty());
  EXPECT_EQ(f32_of(empty_meta.at("x")), std::vector<float>{2.5f});

  // 43 spaces after the JSON (the data section starts unaligned), metadata last.
  SafetensorsFile padded = open("padded.safetensors");
  EXPECT_EQ(padded.metadata(), (SafetensorsMetadata{{"format", "pt"}, {"note", "43 spaces"}}));
  EXPECT_EQ(padded.at("b").dtype, SafetensorsDType::BF16);
  EXPECT_EQ(f32_of(padded.at("b")), (std::vector<float>{1, -2, 0.5f, 3.140625f}));
  EXPECT_EQ(f32_of(padded.at("f")), (std::vector<float>{0.001f, -7}));

  SafetensorsFile unpadded = open("unpadded.safetensors");  // header length not a multiple of 8
  EXPECT_EQ(values_of<uint8_t>(unpadded.at("u")), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_TRUE(unpadded.at("s").shape.empty());
  EXPECT_EQ(f32_of(unpadded.at("s")), std::vector<float>{0.125f});

  // Zero-size tensors at the start, between others (three at one offset) and at the end.
  SafetensorsFile zero = open("zero_size.safetensors");
  ASSERT_EQ(zero.tensors().size(), 6u);
  EXPECT_EQ(zero.at("z1").shape, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(zero.at("z2").shape, (std::vector<int64_t>{0, 0, 2}));
  for (const char* z : {"z0", "z1", "z2", "z3"}) EXPECT_EQ(zero.at(z).numel(), 0) << z;
  EXPECT_EQ(f32_of(zero.at("z1")), std::vector<float>{});
  EXPECT_EQ(f32_of(zero.at("a")), (std::vector<float>{1, 2}));
  EXPECT_EQ(values_of<uint8_t>(zero.at("c")), std::vector<uint8_t>{9});
  EXPECT_EQ(names_in_data_order(zero).front(), "z0");
  EXPECT_EQ(names_in_data_order(zero).back(), "z3");

  SafetensorsFile only_empty = open("only_empty.safetensors");  // an empty data section
  ASSERT_EQ(only_empty.tensors().size(), 1u);
  EXPECT_EQ(only_empty.at("e").shape, (std::vector<int64_t>{0, 4}));
  SafetensorsFile no_tensors = open("no_tensors.safetensors");
  EXPECT_TRUE(no_tensors.tensors().empty());
  EXPECT_EQ(no_tensors.metadata(), (SafetensorsMetadata{{"k", "v"}}));

  // F16 and BF16 widen exactly (F16's largest value, smallest subnormal, -0 and inf; a BF16
  // subnormal); other dtypes are read but refused as weights with what to do.
  SafetensorsFile halves = open("halves.safetensors");
  std::vector<float> h = f32_of(halves.at("h"));
  EXPECT_EQ(h, (std::vector<float>{1, -2, 0.5f, 65504, std::ldexp(1.0f, -24), -0.0f, INFINITY}));
  EXPECT_TRUE(std::signbit(h[5]));
  EXPECT_EQ(f32_of(halves.at("hb")), (std::vector<float>{1, -3, std::ldexp(1.0f, -130)}));
  EXPECT_EQ(values_of<double>(halves.at("d")), (std::vector<double>{0.1, -1e300}));
  EXPECT_EQ(values_of<int16_t>(halves.at("s16")), (std::vector<int16_t>{-3, 300}));
  EXPECT_EQ(halves.at("flag").dtype, SafetensorsDType::BOOL);
  EXPECT_EQ(values_of<uint8_t>(halves.at("flag")), (std::vector<uint8_t>{1, 0, 1}));
  std::string msg = safetensors_error_of([&] { f32_of(halves.at("d")); });
  EXPECT_NE(msg.find("tensor \"d\" has dtype F64; precon reads floating-point weights as F32, F16 or BF16: convert"),
            std::string::npos)
      << msg;
  EXPECT_NE(safetensors_error_of([&] { f32_of(halves.at("flag")); }).find("dtype BOOL"), std::string::npos);
}

TEST(Safetensors, TorchReadsOurEdgeCases) {
  TempDir dir;
  const std::vector<float> w = {1.5f, -2, 0.25f, 4};
  const std::vector<kernels::bf16> b16 = {kernels::float_to_bf16(-0.5f), kernels::float_to_bf16(3)};
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x0001, 0x7BFF};  // 1, -2, 2^-24, 65504
  const std::vector<uint8_t> u8 = {5, 6, 7, 8, 9};
  const int64_t step = -(int64_t(1) << 33);
  const std::vector<SafetensorsEntry> entries = {{"u8", SafetensorsDType::U8, {5}, u8.data()},
                                                 {"empty", SafetensorsDType::F32, {0, 3}, nullptr},
                                                 {"w", SafetensorsDType::F32, {2, 2}, w.data()},
                                                 {"b16", SafetensorsDType::BF16, {2}, b16.data()},
                                                 {"f16", SafetensorsDType::F16, {4}, f16.data()},
                                                 {"step", SafetensorsDType::I64, {}, &step}};
  write_safetensors(dir.path / "mixed.safetensors", entries, {});  // empty metadata: no key written
  write_safetensors(dir.path / "meta_only.safetensors", {}, {{"format", "pt"}});
  write_safetensors(dir.path / "nothing.safetensors", {}, {});

  TorchScript mixed("read " + (dir.path / "mixed.safetensors").string());
  if (mixed.skipped) GTEST_SKIP() << "PyTorch is missing";
  nlohmann::json m = nlohmann::json::parse(mixed.out);
  EXPECT_TRUE(m["metadata"].is_null()) << m.dump();
  EXPECT_EQ((8 + m["header_length"].get<int64_t>()) % 8, 0);
  const nlohmann::json& t = m["tensors"];
  ASSERT_EQ(t.size(), entries.size()) << m.dump();
  for (auto it = t.begin(); it != t.end(); ++it) EXPECT_TRUE(it.value()["aligned"].get<bool>()) << it.key();
  EXPECT_EQ(t["u8"]["values"], nlohmann::json({5, 6, 7, 8, 9}));
  EXPECT_EQ(t["empty"]["shape"], nlohmann::json({0, 3}));
  EXPECT_EQ(t["empty"]["values"], nlohmann::json::array());
  EXPECT_EQ(t["w"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(t["w"]["values"], nlohmann::json({1.5, -2.0, 0.25, 4.0}));
  EXPECT_EQ(t["b16"]["dtype"], "BF16");
  EXPECT_EQ(t["b16"]["values"], nlohmann::json({-0.5, 3.0}));
  EXPECT_EQ(t["f16"]["dtype"], "F16");
  EXPECT_EQ(t["f16"]["values"], nlohmann::json({1.0, -2.0, std::ldexp(1.0, -24), 65504.0}));
  EXPECT_EQ(t["step"]["shape"], nlohmann::json::array());
  EXPECT_EQ(t["step"]["values"], nlohmann::json({step}));

  nlohmann::json meta_only = nlohmann::json::parse(TorchScript("read " + (dir.path / "meta_only.safetensors").string()).out);
  EXPECT_EQ(meta_only["metadata"], nlohmann::json({{"format", "pt"}}));
  EXPECT_TRUE(meta_only["tensors"].empty());
  nlohmann::json nothing = nlohmann::json::parse(TorchScript("read " + (dir.path / "nothing.safetensors").string()).out);
  EXPECT_TRUE(nothing["metadata"].is_null());
  EXPECT_TRUE(nothing["tensors"].empty());
  EXPECT_EQ(nothing["header_length"], 8);  // "{}" and six spaces
}

}  // namespace
}  // namespace precon::worker
