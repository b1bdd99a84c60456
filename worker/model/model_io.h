// Model weights in safetensors with Hugging Face names and layouts (GPT-2's or Llama's), plus HF's
// config.json, so a checkpoint loads in GPT2LMHeadModel or LlamaForCausalLM unchanged and HF
// weights of either family initialise a run.
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/file_io.h"
#include "worker/config/config.h"
#include "worker/model/params.h"

namespace precon::worker {

class ModelIoError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

// Safetensors of the visible parameters (real vocabulary) in table order, F32, streamed to `out`
// (host-resident parameters are not copied), or as bytes. Needs a store that holds every row.
void write_model_safetensors(ByteSink& out, const ParamStore& params, const ModelConfig& config);
// The same for a model this process does not hold whole (pipeline stages, tensor-parallel parts):
// fetch(row, whole) fills row's whole tensor (storage_numel floats, zeroed) when the file reaches
// it, in table order, so only one whole tensor exists at a time.
using ModelTensorFetch = std::function<void(size_t row, std::vector<float>& whole)>;
void write_model_safetensors(ByteSink& out, const std::vector<ParamSpec>& table, const ModelConfig& config,
                             const ModelTensorFetch& fetch);
std::vector<uint8_t> model_safetensors_bytes(const ParamStore& params, const ModelConfig& config);

// Loads every parameter from a safetensors file. Missing or extra tensors, other shapes (a
// checkpoint of a different model) or dtypes give a ModelIoError naming the file and tensor.
// F32 and BF16 are accepted; padded vocabulary rows are zeroed. A pipeline stage's store takes
// its own rows (every tensor is still checked).
void load_model_safetensors(ParamStore& params, const std::filesystem::path& path);

// HF config.json for this model: GPT2Config's keys, or LlamaConfig's.
nlohmann::json hf_config_json(const ModelConfig& config);

}  // namespace precon::worker
