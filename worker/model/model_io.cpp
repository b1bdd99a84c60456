#include "worker/model/model_io.h"

#include "kernels/backend.h"
#include "worker/ckpt/safetensors.h"

namespace precon::worker {

namespace k = kernels;

namespace {
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}
}  // namespace

void write_model_safetensors(ByteSink& out, const ParamStore& params, const ModelConfig& config) {
  // Contiguous fp32 parameters in host memory are written from where they are; others (on a
  // GPU, strided) are gathered to the host first.
  if (!params.holds_all())
    throw ModelIoError("model.safetensors needs every parameter, and this pipeline stage holds only its own: "
                       "gather the stages first");
  std::vector<std::vector<float>> host;
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params.spec(i);
    k::Tensor visible = params.visible_param(i);
    const void* data = visible.data;
    if (visible.device != k::Device::cpu || visible.dtype != k::DType::f32 || !visible.contiguous()) {
      std::vector<float>& copy = host.emplace_back(spec.numel());
      k::Tensor dst = visible;
      dst.data = copy.data();
      dst.device = k::Device::cpu;
      k::copy(dst, visible);
      data = copy.data();
    }
    entries.push_back({spec.name, SafetensorsDType::F32, spec.shape, data});
  }
  SafetensorsMetadata meta{{"format", "pt"}, {"producer", "precon"}, {"config", hf_config_json(config).dump()}};
  write_safetensors(out, entries, meta);
}

std::vector<uint8_t> model_safetensors_bytes(const ParamStore& params, const ModelConfig& config) {
  VectorSink sink;
  write_model_safetensors(sink, params, config);
  return std::move(sink.bytes());
}

void load_model_safetensors(ParamStore& params, const std::filesystem::path& path) {
  SafetensorsFile file = [&] {
    try {
      return SafetensorsFile::open(path);
    } catch (const std::exception& e) {
      throw ModelIoError(std::string("cannot load model weights: ") + e.what());
    }
  }();
  const std::string where = path.string();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params.spec(i);
    const SafetensorsTensor* t = file.find(spec.name);
    if (!t) {
      throw ModelIoError(where + ": tensor " + spec.name + " is missing: the file is not a GPT-2 model with " +
                         "this configuration");
    }
    if (t->shape != spec.shape) {
      throw ModelIoError(where + ": tensor " + spec.name + " has shape " + shape_text(t->shape) + " but the model " +
                         "expects " + shape_text(spec.shape) + ": the checkpoint was written for a different " +
                         "model shape (check model.n_layer/n_head/d_model/seq_len/vocab_size)");
    }
    if (!params.resident(i)) continue;  // another pipeline stage's row
    std::vector<float> host(spec.numel());
    try {
      safetensors_to_f32(*t, host);
    } catch (const SafetensorsError& e) {
      throw ModelIoError(where + ": " + e.what());
    }
    if (spec.storage_rows > 0) k::fill_zero(params.param(i));
    k::Tensor dst = params.visible_param(i);
    k::Tensor src = dst;
    src.data = host.data();
    src.device = k::Device::cpu;
    k::copy(dst, src);
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    bool known = false;
    for (size_t i = 0; i < params.size() && !known; ++i) known = params.spec(i).name == t.name;
    // HF checkpoints may carry the causal-mask buffers and an explicit tied head.
    const bool ignorable = t.name.ends_with(".attn.bias") || t.name.ends_with(".attn.masked_bias") ||
                           t.name == "lm_head.weight";
    if (!known && !ignorable)
      throw ModelIoError(where + ": unexpected tensor " + t.name + " (not part of this GPT-2 model)");
  }
}

nlohmann::json hf_config_json(const ModelConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.seq_len},
          {"n_ctx", c.seq_len},
          {"n_embd", c.d_model},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"bos_token_id", c.vocab_size - 1},
          {"eos_token_id", c.vocab_size - 1},
          {"torch_dtype", "float32"}};
}

}  // namespace precon::worker
