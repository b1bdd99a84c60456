// Checkpoint loading (worker/ckpt). Input: one byte choosing what the rest is:
//   even  a safetensors file: SafetensorsFile::parse, every F32/F16/BF16 tensor widened to fp32,
//         and the tensors written again and re-read (the same names, dtypes, shapes and bytes);
//   odd   a checkpoint's manifest.json next to one real file (model.safetensors): verify_checkpoint
//         and latest_good_checkpoint over the run directory.
// Allowed failure: worker::SafetensorsError. verify_checkpoint and latest_good_checkpoint report
// damage as text and must not throw at all.
#include <cstring>

#include "tests/fuzz/fuzz_util.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/ckpt/safetensors.h"
#include "worker/common/error.h"

namespace {

using namespace precon::worker;
using precon::fuzz::fail;

constexpr int64_t kMaxWidened = 1 << 20;  // elements per tensor widened to fp32

void safetensors_case(const uint8_t* data, size_t size) {
  SafetensorsFile file = SafetensorsFile::parse(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
  std::vector<SafetensorsEntry> entries;
  for (const SafetensorsTensor& t : file.tensors()) {
    if (t.numel() < 0 || static_cast<uint64_t>(t.numel()) * safetensors_dtype_size(t.dtype) != t.bytes.size()) {
      fail("tensor \"" + t.name + "\": numel and bytes disagree");
    }
    const bool widens = t.dtype == SafetensorsDType::F32 || t.dtype == SafetensorsDType::F16 || t.dtype == SafetensorsDType::BF16;
    if (widens && t.numel() <= kMaxWidened) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      safetensors_to_f32(t, out);
    }
    entries.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  }
  std::vector<uint8_t> again;
  try {
    again = safetensors_bytes(entries, file.metadata());
  } catch (const SafetensorsError&) {
    return;  // the writer is stricter than the reader (it refuses what it would not write)
  }
  const SafetensorsFile reread = SafetensorsFile::parse(std::move(again), "again.safetensors");
  if (reread.tensors().size() != file.tensors().size() || reread.metadata() != file.metadata()) {
    fail("written again, the file has other tensors or metadata");
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    const SafetensorsTensor* r = reread.find(t.name);
    if (!r || r->dtype != t.dtype || r->shape != t.shape || r->bytes.size() != t.bytes.size() ||
        (!t.bytes.empty() && std::memcmp(r->bytes.data(), t.bytes.data(), t.bytes.size()) != 0)) {
      fail("tensor \"" + t.name + "\" changed when written again");
    }
  }
}

void manifest_case(const uint8_t* data, size_t size) {
  const fs::path run = precon::fuzz::scratch_dir() / "run";
  const fs::path dir = checkpoints_dir(run) / checkpoint_dir_name(7);
  static const bool made = [&] {
    fs::create_directories(dir);
    precon::fuzz::write_scratch("run/checkpoints/step_00000007/model.safetensors", "model bytes");
    return true;
  }();
  (void)made;
  precon::fuzz::write_scratch("run/checkpoints/step_00000007/manifest.json", precon::fuzz::as_text(data, size));
  const std::optional<std::string> problem = verify_checkpoint(dir);
  const CheckpointChoice choice = latest_good_checkpoint(run);
  if (problem.has_value() == choice.checkpoint.has_value()) {
    fail("verify_checkpoint and latest_good_checkpoint disagree about the one checkpoint");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] % 2 == 0) {
      safetensors_case(data + 1, size - 1);
    } else {
      manifest_case(data + 1, size - 1);
    }
  } catch (const SafetensorsError&) {
  }
  return 0;
}
