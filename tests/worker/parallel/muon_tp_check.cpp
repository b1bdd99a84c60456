// Run under `mpirun -np 2` by tests/worker/parallel/test_optimizer_owners.cpp: one Muon step over a tiny
// GPT's matrices on two tensor-parallel ranks in each optimizer.muon.tp_mode, against references
// computed in this process:
//   duplicated, distributed: the single-process Muon step (the same result, up to fp32 rounding);
// Each rank holds and steps its tensor-parallel parts of the matrices (as the trainer does).
//   blockwise: each rank's tensor-parallel shard (as params.h's copy_tp_part cuts it)
//              orthogonalised on its own by the naive double-precision Newton–Schulz.
// Prints one line per check and exits 1 if any failed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/reference/linalg_reference.h"
#include "worker/model/params.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/distributed_optimizer.h"
#include "worker/parallel/mpi_communicator.h"
#include "worker/parallel/optimizer_groups.h"

namespace pw = precon::worker;
namespace ref = precon::kernels::reference;

namespace {

int failures = 0;

pw::ModelConfig tiny_model() {
  pw::ModelConfig m;
  m.n_layer = 1;
  m.n_head = 2;
  m.d_model = 16;
  m.seq_len = 8;
  m.vocab_size = 61;
  return m;
}

// Parameters and gradients that every rank computes alike: the whole model's values (by their
// index in a store of whole tensors), of which a store of tensor-parallel parts keeps its own.
void fill(pw::ParamStore& store) {
  int64_t at = 0;
  for (size_t r = 0; r < store.size(); ++r) {
    const pw::ParamSpec& full = store.spec(r);
    std::vector<float> w(static_cast<size_t>(full.storage_numel())), g(w.size());
    for (size_t j = 0; j < w.size(); ++j) {
      const double i = static_cast<double>(at + static_cast<int64_t>(j));
      w[j] = static_cast<float>(0.05 * std::sin(0.7 * i + 0.3));
      g[j] = static_cast<float>(std::cos(1.3 * i + 0.1) + 0.2 * std::sin(0.01 * i));
    }
    pw::copy_part_from_full(full, w.data(), store.param(r), store.tp());
    pw::copy_part_from_full(full, g.data(), store.grad(r), store.tp());
    at += full.storage_numel();
  }
}

// lr 1, no momentum, no weight decay, spectral-free scale 1 per matrix: W' = W − scale·NS(G).
pw::OptimizerConfig muon_config(const std::string& mode, bool split_qkv) {
  pw::OptimizerConfig c;
  c.name = "muon";
  c.lr = 1.0;
  c.weight_decay = 0.0;
  c.muon.momentum = 0.0;
  c.muon.tp_mode = mode;
  c.muon.split_qkv = split_qkv;
  c.muon.scale = "spectral";
  return c;
}

std::vector<pw::OptimParam> matrices(const pw::ParamStore& store) {
  std::vector<pw::OptimParam> out;
  for (size_t i = 0; i < store.size(); ++i) out.push_back({&store.spec(i), store.param(i), store.grad(i), store.tp()});
  return out;
}

std::vector<float> host_of(const precon::kernels::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  precon::kernels::copy(precon::kernels::Tensor::view(v.data(), {t.numel()}), t);
  return v;
}

// The matrices' whole values after one step with `hooks` (null group: one process; else each rank
// steps its tensor-parallel parts and the parts are summed into whole matrices over `world`).
std::vector<std::vector<float>> step_once(const std::string& mode, bool split_qkv, const pw::OptimizerHooks& hooks,
                                          pw::Communicator* world = nullptr) {
  const pw::TpPlace place = hooks.tp ? pw::TpPlace{hooks.tp->index(), hooks.tp->count()} : pw::TpPlace{};
  pw::ParamStore store(pw::gpt2_param_table(tiny_model()), precon::kernels::Device::cpu, {}, place);
  fill(store);
  auto opt = pw::make_optimizer(muon_config(mode, split_qkv), matrices(store), precon::kernels::Device::cpu, hooks);
  opt->step({1, 1.0, 1.0f});
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < store.size(); ++i) {
    if (store.spec(i).kind != pw::ParamKind::matrix) continue;
    if (!store.split(i)) {
      out.push_back(host_of(store.param(i)));
      continue;
    }
    std::vector<float> whole(static_cast<size_t>(store.spec(i).storage_numel()), 0.0f);
    pw::copy_part_to_full(store.spec(i), whole.data(), store.param(i), place);
    world->all_reduce_sum(whole.data(), static_cast<int64_t>(whole.size()));
    out.push_back(std::move(whole));
  }
  return out;
}

void compare(const std::string& what, const std::vector<std::vector<float>>& got,
             const std::vector<std::vector<float>>& want, double tolerance, int rank) {
  double worst = 0;
  for (size_t m = 0; m < want.size(); ++m)
    for (size_t i = 0; i < want[m].size(); ++i) worst = std::max(worst, double(std::fabs(got[m][i] - want[m][i])));
  const bool ok = got.size() == want.size() && worst <= tolerance;
  if (rank == 0 || !ok)
    std::printf("rank %d: %s: max difference %.3g (tolerance %.3g) %s\n", rank, what.c_str(), worst, tolerance,
                ok ? "ok" : "FAILED");
  failures += !ok;
}

// blockwise by hand: each TP shard of G (copy_tp_part) through the naive Newton–Schulz, placed
// back; W' = W − √(fan_out/fan_in)·O with the full matrix's fans (the scale does not change).
std::vector<std::vector<float>> blockwise_reference(int tp) {
  pw::ParamStore store(pw::gpt2_param_table(tiny_model()), precon::kernels::Device::cpu);
  fill(store);
  const auto schedule = precon::kernels::ns_schedule(precon::kernels::ns_coefficient_set("keller"), 5);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < store.size(); ++i) {
    const pw::ParamSpec& full = store.spec(i);
    if (full.kind != pw::ParamKind::matrix) continue;
    std::vector<float> w = host_of(store.param(i)), g = host_of(store.grad(i)), o(w.size(), 0.0f);
    const pw::ParamSpec shard = pw::tp_part_spec(full, tp);
    for (int r = 0; r < tp; ++r) {
      std::vector<float> gs(static_cast<size_t>(shard.numel())), os;
      pw::copy_tp_part(full, g.data(), gs.data(), r, tp, true);
      os = ref::to_float(ref::newton_schulz(ref::from_float(gs, shard.shape[0], shard.shape[1]), schedule, 1e-7));
      pw::copy_tp_part(full, o.data(), os.data(), r, tp, false);
    }
    const float scale = static_cast<float>(std::sqrt(double(full.fan_out) / double(full.fan_in)));
    for (size_t k = 0; k < w.size(); ++k) w[k] -= scale * o[k];
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    pw::MpiSession mpi(&argc, &argv);
    std::unique_ptr<pw::Communicator> world = mpi.world();
    std::unique_ptr<pw::Communicator> tp = world->split(0, world->rank());
    const int rank = world->rank();
    pw::OptimizerHooks hooks;
    hooks.group = pw::share_group(world.get());
    hooks.tp = pw::share_group(tp.get());
    hooks.tensor = world->size();
    std::unique_ptr<pw::Communicator> replicas = world->split(world->rank(), 0);  // one data index
    hooks.replicas = pw::share_group(replicas.get());
    hooks.owners = pw::owner_planner(hooks.group, hooks.tensor, hooks.tp.get());
    // fp32 against fp32 in another order (distributed sums Gram matrices over ranks) or against
    // double (blockwise): five Newton–Schulz steps on 16-wide matrices, measured at most 1.2e-5
    // on entries of size ~0.3; a wrong shard, block or scale moves entries by 1e-1 (blockwise
    // against the whole matrix: 0.26).
    for (bool split : {true, false}) {
      const auto single = step_once("duplicated", split, {});
      const std::string qkv = split ? " (split_qkv)" : "";
      compare("duplicated vs one process" + qkv, step_once("duplicated", split, hooks, world.get()), single, 5e-5, rank);
      compare("distributed vs one process" + qkv, step_once("distributed", split, hooks, world.get()), single, 5e-5, rank);
    }
    compare("blockwise vs per-shard naive Newton-Schulz", step_once("blockwise", false, hooks, world.get()),
            blockwise_reference(world->size()), 5e-5, rank);
    // The check must be able to fail: blockwise is not the whole-matrix result.
    const auto single = step_once("duplicated", false, {});
    const auto block = step_once("blockwise", false, hooks, world.get());
    double apart = 0;
    for (size_t m = 0; m < single.size(); ++m)
      for (size_t i = 0; i < single[m].size(); ++i) apart = std::max(apart, double(std::fabs(single[m][i] - block[m][i])));
    if (rank == 0) std::printf("rank 0: blockwise differs from the whole-matrix step by %.3g\n", apart);
    if (apart < 1e-3) {
      std::printf("rank %d: blockwise equals the whole-matrix step: FAILED\n", rank);
      ++failures;
    }
    double failed = failures;
    world->all_reduce_sum(&failed, 1);
    if (rank == 0 && failed == 0) std::printf("all muon tp_mode checks passed on %d ranks\n", world->size());
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "muon_tp_check: %s\n", e.what());
    return 2;
  }
}
