// Expansion of a 10,000-trial random sweep, resolved TOML included (issue 4: expanding and
// storing ≤ 2 s; this measures the expanding part). Prints a table; exits 1 over budget.
#include <chrono>
#include <cstdio>
#include <string>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"

int main(int argc, char** argv) {
  const int samples = argc > 1 ? std::stoi(argv[1]) : 10000;
  const std::string text = R"(
[model]
n_layer = 4
n_head = 4
d_model = 128
[train]
steps = 1000
[optimizer]
name = "muon"
[sweep]
method = "random"
seed = 1
samples = )" + std::to_string(samples) + R"(
[sweep.parameters]
"optimizer.lr" = { log_uniform = [1e-4, 1e-1] }
"optimizer.adamw.lr" = { log_uniform = [1e-4, 1e-2] }
"optimizer.weight_decay" = { uniform = [0.0, 0.2] }
"optimizer.muon.ns_steps" = { int_uniform = [3, 10] }
"optimizer.muon.coefficients" = { choice = ["keller", "polar-express"] }
"train.seed" = [1, 2, 3]
)";
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  precon::orch::Recipe recipe = precon::orch::parse_recipe_text(text, "bench.toml");
  const auto t1 = clock::now();
  auto trials = precon::orch::expand_sweep(recipe);
  const auto t2 = clock::now();
  size_t bytes = 0;
  for (const auto& t : trials) bytes += t.config_toml.size();
  const double parse_s = std::chrono::duration<double>(t1 - t0).count();
  const double expand_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("%-28s %12s %12s %14s\n", "case", "trials", "seconds", "us/trial");
  std::printf("%-28s %12d %12.4f %14s\n", "parse recipe", 1, parse_s, "");
  std::printf("%-28s %12zu %12.4f %14.2f\n", "expand + config_to_toml", trials.size(), expand_s,
              1e6 * expand_s / static_cast<double>(trials.size()));
  std::printf("resolved TOML: %zu bytes in all; budget 2 s for 10,000 trials: %s\n", bytes,
              expand_s <= 2.0 * samples / 10000 ? "ok" : "OVER");
  return expand_s <= 2.0 * samples / 10000 ? 0 : 1;
}
