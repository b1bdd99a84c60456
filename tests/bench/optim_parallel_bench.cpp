// The distributed optimizers' step under `mpirun -np 2` (one thread a rank), side by side in one
// run, printed as a table by rank 0 (driven by tests/bench/optim_parallel_bench.py):
//   one process      rank 0 steps alone (group of one), rank 1 waits;
//   dp2 duplicated   both ranks step the whole optimizer each (no group: every matrix/block on
//                    every rank, what a data-parallel run did before owners);
//   dp2 owners       both ranks step with the group: each matrix/block on its owner, one all-gather.
// Muon: the full step (momentum, Newton–Schulz, all-gather, update); Shampoo: a refresh step
// (precondition_frequency 1: statistics, both inverse roots of every block, directions, update).
// A step's time is the slowest rank's; the median over --repeats steps after one warm-up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/model/params.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/distributed_optimizer.h"
#include "worker/parallel/mpi_communicator.h"
#include "worker/parallel/optimizer_groups.h"

namespace pw = precon::worker;
namespace k = precon::kernels;

namespace {

pw::ModelConfig model(const std::string& name) {
  pw::ModelConfig m;
  if (name == "gpt2") {
    m.n_layer = 12, m.n_head = 12, m.d_model = 768, m.vocab_size = 50257;
  } else {  // L6 C384
    m.n_layer = 6, m.n_head = 6, m.d_model = 384, m.vocab_size = 256;
  }
  m.seq_len = 256;
  return m;
}

pw::OptimizerConfig optimizer(const std::string& name) {
  pw::OptimizerConfig c;
  c.name = name;
  c.lr = name == "muon" ? 0.02 : 0.003;
  c.shampoo.precondition_frequency = 1;
  return c;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median over `repeats` steps (after one warm-up) of the slowest rank's step time; a null
// optimizer: this rank does not step in this variant.
double time_steps(pw::Optimizer* opt, pw::Communicator& world, int repeats) {
  std::vector<double> times;
  for (int i = 0; i <= repeats; ++i) {
    world.barrier();
    const double t0 = now();
    if (opt) opt->step({i + 1, 1.0, 1.0f});
    float slowest = static_cast<float>(now() - t0);
    world.all_reduce_max(&slowest, 1);
    if (i > 0) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    pw::MpiSession mpi(&argc, &argv);
    std::unique_ptr<pw::Communicator> world = mpi.world();
    std::string model_name = "l6c384";
    int repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--model") == 0) model_name = argv[i + 1];
      if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
    }
    k::set_cpu_threads(1);
    const int rank = world->rank();
    pw::ParamStore store(pw::gpt2_param_table(model(model_name)), k::Device::cpu);
    std::vector<float> host(static_cast<size_t>(store.total_numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(0.02 * std::sin(0.37 * i));
    k::copy(store.all_params(), k::Tensor::view(host.data(), {store.total_numel()}));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(std::cos(0.91 * i + 0.2));
    k::copy(store.all_grads(), k::Tensor::view(host.data(), {store.total_numel()}));
    std::vector<pw::OptimParam> params;
    for (size_t i = 0; i < store.size(); ++i) params.push_back({&store.spec(i), store.param(i), store.grad(i), store.tp()});
    if (rank == 0) {
      std::printf("model %s, %d ranks, 1 thread each, median of %d steps (the slowest rank's)\n", model_name.c_str(),
                  world->size(), repeats);
      std::printf("%-10s %14s %18s %14s %16s %16s\n", "optimizer", "one process s", "dp2 duplicated s", "dp2 owners s",
                  "vs duplicated", "vs one process");
    }
    for (const char* name : {"muon", "shampoo"}) {
      const pw::OptimizerConfig cfg = optimizer(name);
      auto alone = pw::make_optimizer(cfg, params, k::Device::cpu, {});
      const double one = time_steps(rank == 0 ? alone.get() : nullptr, *world, repeats);
      const double duplicated = time_steps(alone.get(), *world, repeats);
      pw::OptimizerHooks hooks;
      hooks.group = pw::share_group(world.get());
      hooks.owners = pw::owner_planner(hooks.group, 1);
      auto owned = pw::make_optimizer(cfg, params, k::Device::cpu, hooks);
      const double owners = time_steps(owned.get(), *world, repeats);
      if (rank == 0)
        std::printf("%-10s %14.3f %18.3f %14.3f %15.2fx %15.2fx\n", name, one, duplicated, owners, duplicated / owners,
                    one / owners);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_parallel_bench: %s\n", e.what());
    return 1;
  }
}
