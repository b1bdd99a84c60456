// Helpers shared by the optimizer tests: a tiny GPT-2 parameter store, configs from JSON, host copies.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "tests/common/test_util.h"
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
  for (size_t i = 0; i < store.size(); ++i) out.push_back({&store.spec(i), store.param(i), store.grad(i)});
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

// The optimizer section of a config from the JSON the Python reference writes (same key names).
inline OptimizerConfig config_from_json(const nlohmann::json& j) {
  OptimizerConfig c;
  c.name = j.at("name");
  c.lr = j.value("lr", c.lr);
  c.weight_decay = j.value("weight_decay", c.weight_decay);
  c.weight_decay_mode = j.value("weight_decay_mode", c.weight_decay_mode);
  if (j.contains("adamw")) {
    const auto& a = j["adamw"];
    c.adamw.lr = a.value("lr", c.adamw.lr);
    c.adamw.beta1 = a.value("beta1", c.adamw.beta1);
    c.adamw.beta2 = a.value("beta2", c.adamw.beta2);
    c.adamw.eps = a.value("eps", c.adamw.eps);
    c.adamw.weight_decay = a.value("weight_decay", c.adamw.weight_decay);
  }
  if (j.contains("muon")) {
    const auto& m = j["muon"];
    c.muon.momentum = m.value("momentum", c.muon.momentum);
    c.muon.nesterov = m.value("nesterov", c.muon.nesterov);
    c.muon.momentum_form = m.value("momentum_form", c.muon.momentum_form);
    c.muon.ns_steps = m.value("ns_steps", c.muon.ns_steps);
    c.muon.coefficients = m.value("coefficients", c.muon.coefficients);
    if (m.contains("coefficient_list")) {
      for (const auto& t : m["coefficient_list"]) c.muon.coefficient_list.push_back({t[0], t[1], t[2]});
    }
    c.muon.scale = m.value("scale", c.muon.scale);
    c.muon.split_qkv = m.value("split_qkv", c.muon.split_qkv);
    c.muon.ns_eps = m.value("ns_eps", c.muon.ns_eps);
  }
  if (j.contains("shampoo")) {
    const auto& s = j["shampoo"];
    c.shampoo.beta1 = s.value("beta1", c.shampoo.beta1);
    c.shampoo.beta2 = s.value("beta2", c.shampoo.beta2);
    c.shampoo.epsilon = s.value("epsilon", c.shampoo.epsilon);
    c.shampoo.precondition_frequency = s.value("precondition_frequency", c.shampoo.precondition_frequency);
    c.shampoo.start_preconditioning_step = s.value("start_preconditioning_step", c.shampoo.start_preconditioning_step);
    c.shampoo.exponent = s.value("exponent", c.shampoo.exponent);
    c.shampoo.max_preconditioner_dim = s.value("max_preconditioner_dim", c.shampoo.max_preconditioner_dim);
    c.shampoo.grafting = s.value("grafting", c.shampoo.grafting);
    c.shampoo.grafting_beta2 = s.value("grafting_beta2", c.shampoo.grafting_beta2);
    c.shampoo.grafting_epsilon = s.value("grafting_epsilon", c.shampoo.grafting_epsilon);
    c.shampoo.root_method = s.value("root_method", c.shampoo.root_method);
    c.shampoo.bias_correction = s.value("bias_correction", c.shampoo.bias_correction);
    c.shampoo.params = s.value("params", c.shampoo.params);
  }
  return c;
}

}  // namespace precon::worker::testing
