// Newton–Schulz orthogonalization (the iteration Muon applies to its update).
//   X = G (transposed if rows > cols); X /= ‖X‖_F + eps
//   for (a, b, c) in schedule: A = X Xᵀ; B = bA + cA²; X = aX + BX
#pragma once

#include <string_view>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace precon::kernels {

struct NsCoefficients {
  float a, b, c;
};

// A named coefficient set: "keller" (one tuple, repeated) or "polar-express" (per-step
// minimax tuples). Throws UnsupportedError naming the known sets for anything else.
std::vector<NsCoefficients> ns_coefficient_set(std::string_view name);
// The names ns_coefficient_set knows, in the order documented.
const std::vector<std::string>& ns_coefficient_set_names();

// The per-step schedule for `steps` steps: the set's tuples in order, the last one repeated.
std::vector<NsCoefficients> ns_schedule(const std::vector<NsCoefficients>& set, int steps);

struct NsOptions {
  std::vector<NsCoefficients> schedule;  // one tuple per step (see ns_schedule)
  float eps = 1e-7f;                     // added to the Frobenius norm before scaling
  DType compute = DType::f32;            // f32 everywhere; bf16 on CUDA
};

// out = NS(g) for g of shape (rows, cols) or a batch (batch, rows, cols); out has g's shape and
// dtype and may alias g. An all-zero matrix gives zeros; non-finite input throws NonFiniteError.
void newton_schulz(Tensor out, const Tensor& g, const NsOptions& options);

}  // namespace precon::kernels
