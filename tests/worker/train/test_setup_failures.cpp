// Failures that the config names and that no retry changes end precon-train with exit 2 (bad
// configuration: the controller does not launch the trial again) and a message naming the file or
// key: token shards that are not what they must be, a train.init_from of another shape or holding
// NaN, a model too large for the memory this process may have (train.memory_check, before anything is
// allocated: against MemAvailable, and a cgroup's limit), and a model too large to allocate. A run
// that fails while training still exits 1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/common/memory_cgroup.h"
#include "tests/worker/support/mpi_run_fixture.h"
#include "worker/ckpt/safetensors.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;
using mpitest::Result;

class SetupFailures : public mpitest::MpiRunFixture {
 protected:
  Result train(const fs::path& cfg, const std::string& name, const std::string& sets = "") {
    return run(trainer(cfg, name, "--set train.steps=2 " + sets) + " 2>&1");
  }
  void expect_config_error(const Result& r, const std::string& says) {
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  }
  // A token file of these raw bytes.
  fs::path raw_file(const std::string& name, const std::vector<int32_t>& header, size_t tokens) {
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
    const std::vector<uint16_t> body(tokens, 3);
    out.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size() * 2));
    return p;
  }
  static std::vector<int32_t> header(int32_t magic, int32_t count) {
    std::vector<int32_t> h(256, 0);
    h[0] = magic;
    h[1] = 1;
    h[2] = count;
    return h;
  }
};

TEST_F(SetupFailures, BadTokenShardsAreConfigurationErrors) {
  const fs::path cfg = config(mpitest::kOptimizers[0]);
  struct Case {
    const char* name;
    fs::path file;
    const char* says;
  };
  const Case cases[] = {
      {"magic", raw_file("magic.bin", header(12345, 100), 100), "is not a precon/llm.c token shard"},
      {"empty", raw_file("empty.bin", header(20240520, 0), 0), "empty.bin"},
      {"short", raw_file("short.bin", header(20240520, 10), 10), "short.bin"},
      {"header", raw_file("header.bin", std::vector<int32_t>(20, 20240520), 0), "too short for its header"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_config_error(train(cfg, c.name, "--set data.train=" + c.file.string()), c.says);
  }
}

TEST_F(SetupFailures, AnInitFromOfAnotherShapeOrHoldingNanIsAConfigurationError) {
  const fs::path cfg = config(mpitest::kOptimizers[0]);
  ASSERT_EQ(train(cfg, "source", "--set train.checkpoint_every=2").status, 0);
  const fs::path weights = dir_ / "source" / "checkpoints" / "step_00000002" / "model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  expect_config_error(train(cfg, "wider", "--set model.d_model=64 --set train.init_from=" + weights.string()),
                      "has shape");

  // The same file with one NaN in wte.
  SafetensorsFile file = SafetensorsFile::open(weights);
  std::vector<std::vector<float>> copies;
  std::vector<SafetensorsEntry> entries;
  for (const SafetensorsTensor& t : file.tensors()) {
    std::vector<float> v(t.bytes.size() / sizeof(float));
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    if (t.name == "wte.weight") v[7] = std::numeric_limits<float>::quiet_NaN();
    copies.push_back(std::move(v));
    entries.push_back({t.name, t.dtype, t.shape, copies.back().data()});
  }
  const fs::path nan = dir_ / "nan.safetensors";
  write_safetensors(nan, entries, {{"format", "pt"}});
  expect_config_error(train(cfg, "nan", "--set train.init_from=" + nan.string()), "wte.weight holds NaN");
}

TEST_F(SetupFailures, AModelTooLargeToAllocateIsAConfigurationError) {
  // 256 layers of d_model 65536: about 13 · 10¹² parameters, 52 TB in fp32.
  const fs::path cfg = config(mpitest::kOptimizers[0]);
  // Under AddressSanitizer an allocation that large is an error report unless it may return null.
  const Result r = run("ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 " +
                       trainer(cfg, "huge", "--set train.steps=2 --set model.n_layer=256 --set model.d_model=65536 "
                                            "--set model.n_head=256 --set train.memory_check=false") +
                       " 2>&1");
  expect_config_error(r, "does not fit in memory");
}

// MemAvailable of /proc/meminfo in bytes.
double mem_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string name, unit; in >> name;) {
    double kib = 0;
    in >> kib >> unit;
    if (name == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

TEST_F(SetupFailures, AModelThatCannotFitIsRefusedBeforeItAllocates) {
  // Twice this machine's available memory in AdamW's 16 bytes a parameter (weight, gradient, two
  // moments): d_model 4096 blocks of 12·C² weights each, as many as that takes.
  const double available = mem_available();
  ASSERT_GT(available, 0);
  const double per_block = 16.0 * 12 * 4096 * 4096;
  const int layers = static_cast<int>(2 * available / per_block) + 1;
  const fs::path cfg = config(mpitest::kOptimizers[0]);
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = train(cfg, "big", "--set model.d_model=4096 --set model.n_head=32 --set model.n_layer=" +
                                         std::to_string(layers));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d blocks of d_model 4096 (%.1f GB of weights and AdamW state) refused in %.3f s\n", layers,
              per_block * layers / 1e9, seconds);
  expect_config_error(r, "train.memory_check: the run needs about");
  for (const char* part : {"parameters ", "gradients ", "optimizer state ", "activations ", "is available ("})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "big" / "metrics.jsonl"));  // refused before training started
}

TEST_F(SetupFailures, AModelLargerThanItsCgroupsLimitIsRefused) {
  // 64 MiB for a model whose weights, gradients and moments take 269 MB: refused, naming the cgroup's
  // limit; the same run with train.memory_check = false starts and the cgroup's out-of-memory killer
  // ends it (SIGKILL).
  test::MemoryCgroup cgroup("precon-memcheck", 64LL << 20);
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.reason();
  const fs::path cfg = config(mpitest::kOptimizers[0]);
  const std::string model = "--set model.n_layer=4 --set model.d_model=512 --set model.n_head=8 --set model.vocab_size=8192";
  Result r = run(cgroup.enter() + trainer(cfg, "cgroup", "--set train.steps=2 " + model) + " 2>&1");
  expect_config_error(r, "train.memory_check: the run needs about");
  EXPECT_NE(r.output.find(cgroup.v2() ? "memory.max 64.0 MiB" : "memory.limit_in_bytes 64.0 MiB"), std::string::npos)
      << r.output;
  r = run(cgroup.enter() + trainer(cfg, "unchecked", "--set train.steps=2 --set train.memory_check=false " + model) +
          " 2>&1");
  EXPECT_TRUE(r.status == 128 + 9 || r.status == -1) << r.status << "\n" << r.output;  // SIGKILL, through a shell or not
  EXPECT_GE(cgroup.oom_kills(), 1);
}

TEST_F(SetupFailures, AFailureWhileTrainingStillExitsOne) {
  const fs::path cfg = config(mpitest::kOptimizers[0]);
  const Result r = run("PRECON_FAULT_NAN_LOSS_AT_STEP=1 " + trainer(cfg, "nanloss", "--set train.steps=2") + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.output;
}

}  // namespace
}  // namespace precon::worker
