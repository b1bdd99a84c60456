// Helpers shared by the optimizer tests: a tiny GPT-2 parameter store, configs from JSON, host copies.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "tests/common/test_util.h"
#include "worker/config/parse.h"
#include "worker/model/params.h"
#include "worker/optim/optimizer.h"

namespace precon::worker::testing {

inline ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 1;
  m.n_head = 2;
  m.d_model = 16;
  m.seq_len = 8;
  m.vocab_size = 50;
  return m;
}

inline std::vector<OptimParam> optim_params(const ParamStore& store) {
  std::vector<OptimParam> out;
  for (size_t i = 0; i < store.size(); ++i)
    if (trained(store.spec(i).kind)) out.push_back({&store.spec(i), store.param(i), store.grad(i), store.tp()});
  return out;
}

// The visible part (wte without its padded rows) as a host vector.
inline std::vector<float> host_visible(const ParamStore& store, size_t i, bool grad = false) {
  kernels::Tensor t = grad ? store.grad(i) : store.param(i);
  const ParamSpec& s = store.spec(i);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

inline void set_visible(const ParamStore& store, size_t i, const std::vector<float>& v, bool grad = false) {
  kernels::Tensor t = grad ? store.grad(i) : store.param(i);
  std::memcpy(t.data, v.data(), v.size() * sizeof(float));
}

// Seeded normal values into every visible parameter (or gradient); padded rows stay zero.
inline void fill_random(const ParamStore& store, uint64_t seed, float stddev, bool grad) {
  for (size_t i = 0; i < store.size(); ++i) {
    set_visible(store, i, test::random_normal(static_cast<size_t>(store.spec(i).numel()), seed * 1000 + i, stddev),
                grad);
  }
}

// The optimizer section of a config from the JSON the Python reference writes (the key table's
// names under [optimizer], nested as its tables): each leaf set as `--set optimizer.<path>=<value>`
// would set it, so every key is type-, range- and choice-checked as a recipe's is.
inline void set_optimizer_keys(ParsedConfig& parsed, const nlohmann::json& j, const std::string& prefix) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) set_optimizer_keys(parsed, value, prefix + key + ".");
    else apply_override(parsed, prefix + key + "=" + value.dump());
  }
}

inline OptimizerConfig config_from_json(const nlohmann::json& j) {
  ParsedConfig parsed;
  set_optimizer_keys(parsed, j, "optimizer.");
  return parsed.config.optimizer;
}

}  // namespace precon::worker::testing
