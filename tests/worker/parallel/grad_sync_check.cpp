// Run under `mpirun -np 3` by tests/worker/parallel/test_optimizer_owners.cpp: the gradient sum with some
// parameters reduced to a root and the rest all-reduced, against the sums computed in one process.
// Checks the values on every rank (the root's sum, zeros on the others), the global norm (each
// gradient counted once), and the bytes sent (comm_cost.h). Prints one line per failed check and
// exits 1 if any failed.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/parallel/comm_cost.h"
#include "worker/parallel/grad_sync.h"
#include "worker/parallel/mpi_communicator.h"

namespace pw = precon::worker;

namespace {

int failures = 0;
int rank_ = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::printf("rank %d: %s\n", rank_, what.c_str());
  ++failures;
}

// A gradient element that depends on (rank, parameter, i): every rank can compute every sum.
float value(int rank, size_t param, int64_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.7 * static_cast<double>(param)));
}

}  // namespace

int main(int argc, char** argv) {
  pw::MpiSession mpi(&argc, &argv);
  auto group = mpi.world();
  rank_ = group->rank();
  const int P = group->size();
  // Sizes and roots chosen so that buckets mix roots, a run of equal roots spans parameters, and
  // every rank is some parameter's root.
  const std::vector<int64_t> sizes = {7, 300, 5, 260, 260, 3, 500, 11};
  const std::vector<int> roots = {-1, 0, -1, 1 % P, 1 % P, -1, 2 % P, -1};
  std::vector<pw::ParamSpec> table;
  for (size_t i = 0; i < sizes.size(); ++i) {
    pw::ParamSpec s;
    s.name = "p" + std::to_string(i);
    s.shape = {sizes[i]};
    s.kind = roots[i] < 0 ? pw::ParamKind::bias : pw::ParamKind::matrix;
    table.push_back(s);
  }
  pw::ParamStore store(table, precon::kernels::Device::cpu);
  const float scale = 1.0f / static_cast<float>(P);
  // A 1 KB bucket: several buckets, filled by ranges that arrive from the end of the table.
  pw::GradientSync sync(*group, store, roots, 1024);
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < sizes.size(); ++i)
      for (int64_t j = 0; j < sizes[i]; ++j) store.grad(i).f32()[j] = value(rank_, i, j) * (1 + step);
    for (size_t i = sizes.size(); i-- > 0;) sync.ready(i, i + 1);
    sync.finish(scale);
    double norm2 = 0;
    int64_t expected_bytes = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      double worst = 0;
      const bool holds = roots[i] < 0 || roots[i] == rank_;
      for (int64_t j = 0; j < sizes[i]; ++j) {
        double sum = 0;
        for (int r = 0; r < P; ++r) sum += value(r, i, j) * (1 + step);
        const double want = holds ? sum * scale : 0.0;
        worst = std::max(worst, std::fabs(store.grad(i).f32()[j] - want));
        norm2 += sum * scale * sum * scale;
      }
      expect(worst < 1e-5, "step " + std::to_string(step) + " p" + std::to_string(i) + " (root " +
                               std::to_string(roots[i]) + "): max difference " + std::to_string(worst));
      const int64_t bytes = sizes[i] * 4;
      expected_bytes += roots[i] < 0 ? pw::sent_by_all_reduce(bytes, P) : pw::sent_by_reduce(bytes, P, roots[i] == rank_);
    }
    const double norm = sync.norm();
    expect(std::fabs(norm - std::sqrt(norm2)) < 1e-5 * std::sqrt(norm2),
           "step " + std::to_string(step) + ": norm " + std::to_string(norm) + ", one process " + std::to_string(std::sqrt(norm2)));
    // Runs of equal roots may merge across parameters; the bytes are per element, so they add up.
    expect(sync.bytes_sent() == (step + 1) * expected_bytes,
           "bytes sent " + std::to_string(sync.bytes_sent()) + ", expected " + std::to_string((step + 1) * expected_bytes));
  }
  expect(sync.reduced_tensors() == 4, "reduced tensors " + std::to_string(sync.reduced_tensors()));
  double total = failures;
  group->all_reduce_sum(&total, 1);
  if (total == 0 && rank_ == 0) std::printf("all gradient sync checks passed on %d ranks\n", P);
  return total == 0 ? 0 : 1;
}
