// Inverse p-th root of a symmetric positive semi-definite matrix: X = (A + εI)^(-1/p).
#pragma once

#include "kernels/tensor.h"

namespace precon::kernels {

enum class RootMethod : uint8_t { eigh, newton };

struct InverseRootOptions {
  double root = 4.0;           // p in A^(-1/p); Shampoo uses 4 per factor of a matrix
  float epsilon = 1e-12f;      // regulariser added to A; eigenvalues are clamped to >= ε
  RootMethod method = RootMethod::eigh;
  bool fp64_retry = true;      // eigh: retry in double precision when fp32 fails
  int newton_max_iters = 100;  // newton: iteration cap
  float newton_tol = 1e-6f;    // newton: stop when ‖M − I‖_F / √n falls below this
};

struct InverseRootInfo {
  bool used_fp64 = false;  // eigh fell back to double precision
  int iterations = 0;      // newton iterations taken
  float residual = 0.0f;   // newton: final ‖M − I‖_F / √n
};

// out = (a + εI)^(-1/p). a must be square and finite (NonFiniteError otherwise); on solver
// failure (after the fp64 retry) or non-finite output throws NumericalError and leaves out
// unchanged, so a caller can keep its previous root.
InverseRootInfo matrix_inverse_root(Tensor out, const Tensor& a, const InverseRootOptions& options);

}  // namespace precon::kernels
