#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kernels/tensor.h"
#include "worker/ckpt/safetensors.h"
#include "worker/common/error.h"

namespace precon::worker {
namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "precon_st_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

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
  return run(std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR + "/tests/worker/safetensors_check.py " + args);
}

template <typename T>
std::vector<T> values_of(const SafetensorsTensor& t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.bytes.data(), t.bytes.size());  // data may be unaligned
  return v;
}

std::string error_of(auto&& fn) {
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
  EXPECT_NE(error_of([&] { f.at("nope"); }).find("no tensor \"nope\""), std::string::npos);
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
    return error_of([&] { SafetensorsFile::parse(raw_file(header, data), "x.safetensors"); });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos && msg.find("x.safetensors") != std::string::npos;
  };
  std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::parse(raw_file(ok, 8), "x"));

  EXPECT_TRUE(has(err(ok, 4), "outside the data section")) << err(ok, 4);
  EXPECT_TRUE(has(err(ok, 12), "trailing bytes")) << err(ok, 12);
  EXPECT_TRUE(has(err("{not json", 0), "not valid JSON"));
  EXPECT_TRUE(has(err(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4), "tensor \"a\": dtype \"F16\""));
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
  EXPECT_NE(error_of([&] { SafetensorsFile::parse(huge, "x"); }).find("does not fit the file"), std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsFile::parse({1, 2, 3}, "x"); }).find("not even a header length"),
            std::string::npos);
}

TEST(Safetensors, TruncatedFileOnDiskIsRejected) {
  TempDir dir;
  Sample s;
  fs::path p = dir.path / "m.safetensors";
  write_safetensors(p, s.entries, s.metadata);
  fs::resize_file(p, fs::file_size(p) - 3);
  std::string msg = error_of([&] { SafetensorsFile::open(p); });
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

}  // namespace
}  // namespace precon::worker
