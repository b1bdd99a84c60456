#include "worker/train/train_state.h"

#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "kernels/linalg.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/ckpt/safetensors.h"
#include "worker/common/error.h"
#include "worker/common/json_error.h"
#include "worker/config/choice.h"
#include "worker/config/keys.h"
#include "worker/config/parse.h"
#include "worker/model/model_io.h"
#include "worker/train/optimizer_files.h"

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

constexpr const char* kOptimizerIndex = "optimizer.json";  // optimizer_files.h
constexpr const char* kPerturbEnv = "PRECON_FAULT_PERTURB_REPLICA";

int group_rank(const RunState& state) { return state.group ? state.group->rank() : 0; }
int group_size(const RunState& state) { return state.group ? state.group->size() : 1; }

// FNV-1a over the bytes of every parameter (with `replicated_only`, of the rows that tensor
// parallelism does not split: the same on every rank of a tensor-parallel group).
uint64_t params_checksum(const ParamStore& params, bool replicated_only = false) {
  uint64_t h = 1469598103934665603ull;
  std::vector<float> host;
  auto add = [&](const k::Tensor& t) {
    host.resize(static_cast<size_t>(t.numel()));
    k::copy(k::Tensor::view(host.data(), {t.numel()}), t.reshape({t.numel()}));
    const auto* p = reinterpret_cast<const unsigned char*>(host.data());
    for (size_t i = 0; i < host.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  if (!replicated_only) {
    add(params.all_params());
    return h;
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (params.resident(i) && !params.split(i)) add(params.param(i));
  return h;
}

// The ranks of `group` whose checksum differs from its first rank's, as their ranks in the job
// ("" when none), and that first rank's.
std::pair<std::string, int64_t> differing_ranks(Communicator& group, uint64_t mine, const RunState& state) {
  const int rank = group.rank(), ranks = group.size();
  // Each rank's checksum and its rank in the whole job (the names in the message).
  std::vector<int64_t> sums(static_cast<size_t>(ranks), INT64_MIN), job_rank(static_cast<size_t>(ranks), INT64_MIN);
  std::memcpy(&sums[static_cast<size_t>(rank)], &mine, sizeof mine);
  job_rank[static_cast<size_t>(rank)] = state.group ? state.group->rank() : rank;
  group.all_reduce_max(sums.data(), ranks);
  group.all_reduce_max(job_rank.data(), ranks);
  std::string differ;
  for (int r = 1; r < ranks; ++r)
    if (sums[static_cast<size_t>(r)] != sums[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(job_rank[static_cast<size_t>(r)]);
  return {differ, job_rank[0]};
}

// The ranks of state.replicas hold the same parameters: after a load they must hold the same ones.
void check_replicas(const std::filesystem::path& dir, const RunState& state) {
  Communicator* group = state.replicas ? state.replicas : state.group;
  if (!group || group->size() == 1) return;
  if (const char* v = std::getenv(kPerturbEnv); v && std::atoi(v) == group->rank())
    k::scale(state.model->params().param(0), 1.001f);
  const auto [differ, first] = differing_ranks(*group, params_checksum(state.model->params()), state);
  if (!differ.empty())
    throw CheckpointError("after loading " + dir.string() + " the parameters of rank(s) " + differ + " differ from rank " +
                          std::to_string(first) + "'s (parameter checksums compared over the " +
                          std::to_string(group->size()) + " ranks that hold them): the replicas would train different models; "
                          "check that every rank reads the same checkpoint directory");
}

// The rows tensor parallelism replicates (norms, biases, positions, routers) are computed alike on
// every rank of a tensor-parallel group, which checkpoints write from its first rank only: before
// writing, they must agree.
void check_tensor_replicas(const RunState& state) {
  if (!state.tp || state.tp->size() == 1) return;
  const auto [differ, first] = differing_ranks(*state.tp, params_checksum(state.model->params(), true), state);
  if (!differ.empty())
    throw CheckpointError("the replicated parameters (norms, biases) of tensor-parallel rank(s) " + differ +
                          " differ from rank " + std::to_string(first) +
                          "'s: the tensor-parallel ranks no longer train one model");
}

}  // namespace

std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const RunState& state) {
  check_tensor_replicas(state);
  const int rank = group_rank(state), ranks = group_size(state);
  Communicator* group = state.group;
  // The other ranks' files go into a parts directory named after the first rank's pid.
  int64_t pid = ::getpid();
  if (group) group->broadcast(&pid, sizeof pid, 0);
  const std::filesystem::path parts = checkpoint_parts_dir(run_dir, step, static_cast<long>(pid));
  if (ranks > 1) {
    if (rank == 0) {
      std::filesystem::remove_all(parts);
      std::filesystem::create_directories(parts);
    }
    group->barrier();
  }
  OptimizerFile mine = optimizer_file(*state.optimizer);
  if (rank != 0) write_safetensors(parts / optimizer_file_name(rank, ranks), mine.entries, mine.metadata);
  if (ranks > 1) group->barrier();  // every file is written and fsynced
  // The model's rows this rank is the source of, as the first rank writes model.safetensors.
  if (rank != 0 && state.send_model_rows) state.send_model_rows();
  std::filesystem::path dir = checkpoints_dir(run_dir) / checkpoint_dir_name(step);
  if (rank == 0) {
    json trainer = {{"step", step},
                    {"config_hash", config_hash(*state.config)},
                    {"loader", state.loader->state()},
                    {"optimizer", state.optimizer->state_scalars()},
                    {"parallel",
                     {{"tensor", state.config->parallel.tensor},
                      {"data", state.config->parallel.data},
                      {"pipeline", state.config->parallel.pipeline},
                      {"virtual_stages", state.config->parallel.virtual_stages},
                      {"expert", state.config->parallel.expert}}},
                    {"format", 1}};
    if (state.objective && std::isfinite(*state.objective)) {
      trainer["objective"] = {{"metric", state.config->objective.metric},
                              {"mode", state.config->objective.mode},
                              {"value", *state.objective}};
    }
    std::vector<FileListing> listings = {{optimizer_file_name(0, ranks), mine.entries, mine.metadata}};
    for (int r = 1; r < ranks; ++r) {
      const SafetensorsFile other = SafetensorsFile::open(parts / optimizer_file_name(r, ranks));
      FileListing& listing = listings.emplace_back(FileListing{optimizer_file_name(r, ranks), {}, other.metadata()});
      for (const SafetensorsTensor& t : other.tensors()) listing.entries.push_back({t.name, t.dtype, t.shape, nullptr});
    }
    std::vector<CheckpointFile> files;
    // Streamed into the checkpoint: no in-memory copy of the weights or the optimizer state.
    files.push_back({"model.safetensors", [&state](ByteSink& out) {
                       if (state.fetch_model_row)
                         write_model_safetensors(out, state.model->params().table(), state.config->model,
                                                 state.fetch_model_row);
                       else
                         write_model_safetensors(out, state.model->params(), state.config->model);
                     }});
    files.push_back({optimizer_file_name(0, ranks), [&mine](ByteSink& out) {
                       write_safetensors(out, mine.entries, mine.metadata);
                     }});
    for (int r = 1; r < ranks; ++r)
      files.push_back(CheckpointFile::adopted(optimizer_file_name(r, ranks), parts / optimizer_file_name(r, ranks)));
    files.push_back(CheckpointFile::from_string(kOptimizerIndex, optimizer_index(listings).dump(1) + "\n"));
    files.push_back(CheckpointFile::from_string("trainer.json", trainer.dump(2) + "\n"));
    files.push_back(CheckpointFile::from_string("config.json", hf_config_json(state.config->model).dump(2) + "\n"));
    files.push_back(CheckpointFile::from_string("config.toml", config_to_toml(*state.config)));
    dir = write_checkpoint(run_dir, step, files);
    if (ranks > 1) std::filesystem::remove_all(parts);
    RetentionPolicy policy;
    policy.keep_last = static_cast<int>(state.config->train.keep_checkpoints);
    policy.keep_best = static_cast<int>(state.config->train.keep_best);
    constexpr Choice<bool> kMinimize[] = {{"min", true}, {"max", false}};  // objective.mode
    policy.minimize = parse_choice<CheckpointError>("objective.mode", state.config->objective.mode, kMinimize);
    policy.objective = [](const CheckpointInfo& c) { return checkpoint_objective(c.dir); };
    apply_retention(run_dir, policy);
  }
  if (ranks > 1) group->barrier();  // the checkpoint counts for every rank
  return dir;
}

std::optional<std::string> checkpoint_unusable(const std::filesystem::path& dir, const RunState& state) {
  try {
    const std::vector<uint8_t> bytes = read_file(dir / "trainer.json");
    const json trainer = json::parse(bytes.begin(), bytes.end());
    const int64_t steps = state.config->train.steps;
    if (!trainer.contains("step") || !trainer.at("step").is_number_integer() || trainer.at("step").get<int64_t>() < 0 ||
        trainer.at("step").get<int64_t>() > steps)
      return "trainer.json: step " + (trainer.contains("step") ? trainer.at("step").dump() : std::string("missing")) +
             " is not within [0, train.steps = " + std::to_string(steps) + "]";
    const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
    const ParamStore& params = state.model->params();
    std::vector<float> values;
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSpec& spec = params.spec(i);
      const SafetensorsTensor* t = file.find(spec.name);
      if (!t) return "model.safetensors: tensor " + spec.name + " is missing";
      if (t->shape != spec.shape) return "model.safetensors: tensor " + spec.name + " has another shape than the model's";
      values.resize(spec.numel());
      safetensors_to_f32(*t, values);
      for (float v : values)
        if (!std::isfinite(v)) return "model.safetensors: tensor " + spec.name + " holds a NaN or infinity";
    }
  } catch (const std::exception& e) {  // unreadable, truncated or not JSON: the reason is the error
    return std::string(e.what());
  }
  return std::nullopt;
}

int64_t load_checkpoint(const std::filesystem::path& dir, const RunState& state) {
  json trainer;
  try {
    std::vector<uint8_t> bytes = read_file(dir / "trainer.json");
    trainer = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw CheckpointError((dir / "trainer.json").string() + ": not valid JSON: " + json_error_text(e));
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
  load_optimizer_files(dir, *state.optimizer, state.group);
  state.optimizer->load_state_scalars(trainer.at("optimizer"));
  state.loader->restore(trainer.at("loader").get<LoaderState>());
  check_replicas(dir, state);
  if (!trainer.at("step").is_number_integer())
    throw CheckpointError((dir / "trainer.json").string() + ": step " + trainer.at("step").dump() + " is not an integer");
  return trainer.at("step").get<int64_t>();
}

}  // namespace precon::worker
