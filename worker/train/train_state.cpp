#include "worker/train/train_state.h"

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/ckpt/safetensors.h"
#include "worker/common/error.h"
#include "worker/config/keys.h"
#include "worker/config/parse.h"
#include "worker/model/model_io.h"

namespace precon::worker {

namespace k = kernels;
using nlohmann::json;

std::string config_hash(const TrialConfig& config) {
  // FNV-1a over the keys that fix the shapes of everything a checkpoint holds (the key table's
  // in_config_hash rows).
  std::string text;
  for (const KeySpec* key : trial_keys())
    if (key->in_config_hash) text += key->name + "=" + value_text(config, *key) + ";";
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

// Streams the optimizer's state tensors; host-resident contiguous fp32 ones without a copy.
void write_optimizer_safetensors(ByteSink& out, Optimizer& optimizer) {
  std::vector<NamedState> states = optimizer.state_tensors();
  std::vector<std::vector<float>> host;
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < states.size(); ++i) {
    const k::Tensor& t = states[i].tensor;
    const void* data = t.data;
    if (t.device != k::Device::cpu || t.dtype != k::DType::f32 || !t.contiguous()) {
      std::vector<float>& copy = host.emplace_back(t.numel());
      k::Tensor dst = t;
      dst.data = copy.data();
      dst.device = k::Device::cpu;
      k::copy(dst, t);
      data = copy.data();
    }
    std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim);
    entries.push_back({states[i].name, SafetensorsDType::F32, shape, data});
  }
  write_safetensors(out, entries, {{"producer", "precon"}});
}

void load_optimizer(const std::filesystem::path& path, Optimizer& optimizer) {
  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<NamedState> states = optimizer.state_tensors();
  for (const NamedState& s : states) {
    const SafetensorsTensor* t = file.find(s.name);
    if (!t) throw CheckpointError(path.string() + ": optimizer state " + s.name + " is missing");
    if (t->dtype != SafetensorsDType::F32 || t->numel() != s.tensor.numel())
      throw CheckpointError(path.string() + ": optimizer state " + s.name + " has " + std::to_string(t->numel()) +
                            " elements, expected " + std::to_string(s.tensor.numel()));
    std::vector<float> host(t->numel());
    std::memcpy(host.data(), t->bytes.data(), host.size() * sizeof(float));
    k::Tensor src = s.tensor;
    src.data = host.data();
    src.device = k::Device::cpu;
    k::copy(s.tensor, src);
  }
  if (file.tensors().size() != states.size())
    throw CheckpointError(path.string() + ": holds " + std::to_string(file.tensors().size()) +
                          " optimizer tensors, this optimizer has " + std::to_string(states.size()));
}

}  // namespace

std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const RunState& state) {
  json trainer = {{"step", step},
                  {"config_hash", config_hash(*state.config)},
                  {"loader", state.loader->state()},
                  {"optimizer", state.optimizer->state_scalars()},
                  {"parallel",
                   {{"tensor", state.config->parallel.tensor},
                    {"data", state.config->parallel.data},
                    {"pipeline", state.config->parallel.pipeline}}},
                  {"format", 1}};
  if (state.objective && std::isfinite(*state.objective)) {
    trainer["objective"] = {{"metric", state.config->objective.metric},
                            {"mode", state.config->objective.mode},
                            {"value", *state.objective}};
  }
  std::vector<CheckpointFile> files;
  // Streamed into the checkpoint: no in-memory copy of the weights or the optimizer state.
  files.push_back({"model.safetensors", [&state](ByteSink& out) {
                     write_model_safetensors(out, state.model->params(), state.config->model);
                   }});
  files.push_back({"optimizer.safetensors", [&state](ByteSink& out) { write_optimizer_safetensors(out, *state.optimizer); }});
  files.push_back(CheckpointFile::from_string("trainer.json", trainer.dump(2) + "\n"));
  files.push_back(CheckpointFile::from_string("config.json", hf_config_json(state.config->model).dump(2) + "\n"));
  files.push_back(CheckpointFile::from_string("config.toml", config_to_toml(*state.config)));
  std::filesystem::path dir = write_checkpoint(run_dir, step, files);
  RetentionPolicy policy;
  policy.keep_last = static_cast<int>(state.config->train.keep_checkpoints);
  policy.keep_best = static_cast<int>(state.config->train.keep_best);
  policy.minimize = state.config->objective.mode != "max";
  policy.objective = [](const CheckpointInfo& c) { return checkpoint_objective(c.dir); };
  apply_retention(run_dir, policy);
  return dir;
}

std::optional<double> checkpoint_objective(const std::filesystem::path& dir) {
  try {
    std::vector<uint8_t> bytes = read_file(dir / "trainer.json");
    json trainer = json::parse(bytes.begin(), bytes.end());
    if (!trainer.contains("objective")) return std::nullopt;
    return trainer.at("objective").at("value").get<double>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int64_t load_checkpoint(const std::filesystem::path& dir, const RunState& state) {
  json trainer;
  try {
    std::vector<uint8_t> bytes = read_file(dir / "trainer.json");
    trainer = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw CheckpointError((dir / "trainer.json").string() + ": not valid JSON: " + e.what());
  }
  const std::string want = config_hash(*state.config);
  if (trainer.value("config_hash", "") != want) {
    throw CheckpointError(dir.string() + " was written for another model shape, optimizer or parallel layout " +
                          "(config hash " + trainer.value("config_hash", "?") + ", this run " + want +
                          "); use a fresh run directory or --resume never");
  }
  try {
    load_model_safetensors(state.model->params(), dir / "model.safetensors");
  } catch (const ModelIoError& e) {
    throw CheckpointError(e.what());
  }
  load_optimizer(dir / "optimizer.safetensors", *state.optimizer);
  state.optimizer->load_state_scalars(trainer.at("optimizer"));
  state.loader->restore(trainer.at("loader").get<LoaderState>());
  return trainer.at("step").get<int64_t>();
}

}  // namespace precon::worker
