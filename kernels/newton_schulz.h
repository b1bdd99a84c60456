// Newton–Schulz orthogonalization (the iteration Muon applies to its update).
//   X = G (transposed if rows > cols); X /= ‖X‖_F + eps
//   for (a, b, c) in schedule: A = X Xᵀ; B = bA + cA²; X = aX + BX
#pragma once

#include <functional>
#include <string_view>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace precon::kernels {

struct NsCoefficients {
  float a, b, c;
};

// The named coefficient sets, with the numbers and the rule for steps past a set's end of NVIDIA's
// Emerging-Optimizers (emerging_optimizers/orthogonalized_optimizers/muon_utils.py, _COEFFICIENT_SETS
// and newton_schulz(), as of its commit fd77292):
//   simple         one tuple, repeated (Keller Jordan's Muon; alias "keller");
//   quintic        5 tuples (modded-nanogpt's medium record), cycled;
//   polar_express  8 tuples (Amsel et al. 2025, the 1.01 safety factor folded in), the last repeated
//                  (alias "polar-express");
//   cans           5 tuples (CANS, Grishina et al. 2025), the last repeated;
//   aol            4 tuples (flash-newton-schulz's AOL set), cycled;
//   deepseekv4     simple's tuple 8 times then (2, -1.5, 0.5) twice, the last repeated;
//   cubic5         5 cubic tuples (c = 0: no Gram-square product), exactly 5 steps.
// Throws UnsupportedError naming the known sets for anything else.
std::vector<NsCoefficients> ns_coefficient_set(std::string_view name);
// The names ns_coefficient_set knows (aliases last), in the order documented.
const std::vector<std::string>& ns_coefficient_set_names();

// The per-step schedule for `steps` steps of a named set, by its rule above; cubic5 with steps != 5
// throws UnsupportedError.
std::vector<NsCoefficients> ns_schedule(std::string_view name, int steps);
// Of an explicit list: its tuples in order, the last one repeated.
std::vector<NsCoefficients> ns_schedule(const std::vector<NsCoefficients>& set, int steps);
// The step count a named set requires (cubic5: 5), or 0 when any count is fine.
int ns_required_steps(std::string_view name);

struct NsOptions {
  std::vector<NsCoefficients> schedule;  // one tuple per step (see ns_schedule)
  float eps = 1e-7f;                     // added to the Frobenius norm before scaling
  DType compute = DType::f32;            // f32 everywhere; bf16 on CUDA
};

// out = NS(g) for g of shape (rows, cols) or a batch (batch, rows, cols); out has g's shape and
// dtype and may alias g. An all-zero matrix gives zeros; non-finite input throws NonFiniteError.
// A batch on the CPU with at least as many matrices as OpenMP threads runs one matrix per thread
// (each exactly as alone, up to the order of a sum inside a product); on a GPU it runs as
// newton_schulz_batch_gemm.
void newton_schulz(Tensor out, const Tensor& g, const NsOptions& options);

// A batch (batch, rows, cols) as batched products: every matrix's norm in one reduction and one
// host round trip, then each step's three products as one strided-batched GEMM each for the whole
// batch (X Xᵀ and A² as full GEMMs: there is no batched SYRK), instead of a launch and a host sync
// per matrix. The GPU's form; it runs on any backend (the tests check it on the CPU). Norms are
// summed in double from fp32 g, so in bf16 compute the result differs from the per-matrix path
// (which casts before taking the norm) by bf16 rounding. g and out as for newton_schulz.
void newton_schulz_batch_gemm(Tensor out, const Tensor& g, const NsOptions& options);

// The iteration itself, one step per tuple of `schedule`, on X already divided by its norm. With
// `gram_of_rows` A = X Xᵀ and each step is X ← (cA² + bA) X + aX; without, A = XᵀX and X ← X(cA² +
// bA) + aX (c = 0: a cubic step, no A²). `reduce_gram`, when given, is applied to each A once it is
// formed: the sum over the ranks that hold parts of X (worker/optim/parts.h). x and y (X's shape)
// take turns; a and b are A's shape. Returns the one that holds the result.
Tensor newton_schulz_steps(Tensor x, Tensor y, Tensor a, Tensor b, const std::vector<NsCoefficients>& schedule,
                           bool gram_of_rows, const std::function<void(Tensor&)>& reduce_gram = {});

}  // namespace precon::kernels
