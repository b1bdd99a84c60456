// The name -> factory registry and the learning-rate schedules.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "worker/config/choice.h"
#include "worker/config/parse.h"
#include "worker/optim/optim_internal.h"

namespace precon::worker {

namespace {

struct Registry {
  Registry() {
    factories["adamw"] = optim::make_adamw;
    factories["muon"] = optim::make_muon;
    factories["shampoo"] = optim::make_shampoo;
    factories["soap"] = optim::make_soap;
  }
  std::mutex mutex;
  std::map<std::string, OptimizerFactory> factories;
};

// The built-ins are registered here, on first use, rather than by static initialisers in their
// own files: a static library's object file that nothing references is dropped by the linker,
// and its registration with it.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_optimizer(const std::string& name, OptimizerFactory factory) {
  if (name.empty() || !factory) throw OptimizerError("register_optimizer: empty name or factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                          kernels::Device device, const OptimizerHooks& hooks) {
  Registry& r = registry();
  OptimizerFactory factory;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.factories.find(config.name);
    if (it != r.factories.end()) factory = it->second;
    for (const auto& [name, f] : r.factories) known += (known.empty() ? "" : ", ") + name;
  }
  if (!factory) throw OptimizerError("unknown optimizer.name '" + config.name + "' (known: " + known + ")");
  // The key table's ranges, choices and rules: the same checks a recipe and a trial config get.
  TrialConfig probe;
  probe.optimizer = config;
  ConfigIssues issues;
  for (const char* section : {"optimizer.adamw.", "optimizer.muon.", "optimizer.shampoo.", "optimizer.soap."})
    check_values(probe, section, "optimizer config", issues);
  try {
    issues.throw_if_any();
  } catch (const ConfigError& e) {
    throw OptimizerError(e.what());
  }
  for (const OptimParam& p : params) {
    if (p.spec == nullptr) throw OptimizerError("make_optimizer: a parameter without its table row");
  }
  return factory(config, params, device, hooks);
}

// With W = warmup_steps, N = total_steps, m = min_lr_ratio and 1-based step t:
//   warm-up (t <= W):  t / W
//   constant:          1
//   cosine:            m + (1 - m) · ½ (1 + cos(π p)),  p = clamp((t - W) / (N - W), 0, 1)
//   linear:            1 - (1 - m) · p
//   wsd:               1 until S = max(W, N - round(decay_fraction · N)), then
//                      1 - (1 - m) · clamp((t - S) / (N - S), 0, 1)
// p is 1 when N <= W (no room to decay: only steps past the end can get there).
double lr_multiplier(const OptimizerConfig& config, int64_t step, int64_t total_steps) {
  const int64_t warmup = std::max<int64_t>(config.warmup_steps, 0);
  const double m = config.min_lr_ratio;
  enum class Schedule { constant, cosine, linear, wsd };
  constexpr Choice<Schedule> kSchedules[] = {{"constant", Schedule::constant},
                                             {"cosine", Schedule::cosine},
                                             {"linear", Schedule::linear},
                                             {"wsd", Schedule::wsd}};
  const Schedule s = parse_choice<OptimizerError>("optimizer.schedule", config.schedule, kSchedules);
  if (warmup > 0 && step <= warmup) return static_cast<double>(std::max<int64_t>(step, 0)) / warmup;
  if (s == Schedule::constant) return 1.0;
  auto fraction = [](int64_t from, int64_t t, int64_t to) {
    if (to <= from) return 1.0;
    return std::clamp(static_cast<double>(t - from) / static_cast<double>(to - from), 0.0, 1.0);
  };
  if (s == Schedule::wsd) {
    const int64_t decay = std::llround(config.decay_fraction * static_cast<double>(total_steps));
    const int64_t start = std::max(warmup, total_steps - decay);
    if (step <= start) return 1.0;
    return 1.0 - (1.0 - m) * fraction(start, step, total_steps);
  }
  const double p = fraction(warmup, step, total_steps);
  if (s == Schedule::linear) return 1.0 - (1.0 - m) * p;
  return m + (1.0 - m) * 0.5 * (1.0 + std::cos(M_PI * p));
}

}  // namespace precon::worker
