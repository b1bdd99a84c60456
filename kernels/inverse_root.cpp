// Inverse p-th roots of symmetric PSD matrices, composed from the dispatched primitives.
#include "kernels/inverse_root.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/linalg.h"
#include "kernels/scratch.h"

namespace precon::kernels {

namespace {

constexpr const char* kOp = "matrix_inverse_root";

std::string size_text(int64_t n) { return std::to_string(n) + "x" + std::to_string(n); }

// Identity matrix on the device of `like`, in scratch slot `slot`.
Tensor identity(Device device, int slot, int64_t n) {
  std::vector<float> host(size_t(n) * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) host[size_t(i) * n + i] = 1.0f;
  Tensor eye = scratch(device, slot, {n, n});
  copy(eye, Tensor::view(host.data(), {n, n}));
  return eye;
}

// (A + εI)^(-1/p) = Q diag((max(λ, 0) + ε)^(-1/p)) Qᵀ.
void root_by_eigh(Tensor result, const Tensor& a, const InverseRootOptions& options, InverseRootInfo& info) {
  const int64_t n = a.shape[0];
  Tensor w = scratch(a.device, 0, {n});
  Tensor q = scratch(a.device, 1, {n, n});
  bool ok = symmetric_eigh(w, q, a, false) && all_finite(w) && all_finite(q);
  if (!ok && options.fp64_retry) {
    ok = symmetric_eigh(w, q, a, true) && all_finite(w) && all_finite(q);
    info.used_fp64 = true;
  }
  if (!ok) {
    PRECON_THROW(NumericalError, kOp,
                 "eigendecomposition of a " + size_text(n) + " matrix failed" +
                     (options.fp64_retry ? " in fp32 and in the fp64 retry" : " (fp64 retry disabled)"));
  }
  std::vector<float> lambda(n);
  copy(Tensor::view(lambda.data(), {n}), w);
  std::vector<float> d(n);
  for (int64_t i = 0; i < n; ++i) {
    double clamped = std::max(static_cast<double>(lambda[i]), 0.0) + options.epsilon;
    double v = std::pow(clamped, -1.0 / options.root);
    if (!std::isfinite(v) || v > 3.0e38) {
      PRECON_THROW(NumericalError, kOp,
                   "a " + size_text(n) + " matrix is singular and epsilon = " + std::to_string(options.epsilon) +
                       " does not regularise it; use epsilon > 0");
    }
    d[i] = static_cast<float>(v);
  }
  eigen_reconstruct(result, q, d);
}

// Coupled Newton iteration (GEMM only): M → I while X → (A + εI)^(-1/p).
//   z = (1 + p) / (2‖A‖_F);  M = z A;  X = z^(1/p) I
//   repeat: T = ((p + 1) I − M) / p;  X = X T;  M = T^p M
void root_by_newton(Tensor result, const Tensor& a, const InverseRootOptions& options, InverseRootInfo& info) {
  const int64_t n = a.shape[0];
  const double p = options.root;
  const int ip = static_cast<int>(p);
  if (ip != p || ip < 1) {
    PRECON_THROW(UnsupportedError, kOp,
                 "the Newton iteration needs an integer root p >= 1, got " + std::to_string(p) + "; use eigh");
  }
  const Device dev = a.device;
  Tensor eye = identity(dev, 0, n);
  Tensor m = scratch(dev, 1, {n, n});
  Tensor x = scratch(dev, 2, {n, n});
  Tensor t = scratch(dev, 3, {n, n});
  Tensor tp = scratch(dev, 4, {n, n});
  Tensor tmp = scratch(dev, 5, {n, n});
  Tensor work = scratch(dev, 6, {n, n});
  Tensor prev = scratch(dev, 8, {n, n});

  copy(m, a);
  axpby(m, eye, options.epsilon, 1.0f);  // A + εI
  const double norm = std::sqrt(sum_squares(m));
  if (norm == 0.0) {
    PRECON_THROW(NumericalError, kOp, "the " + size_text(n) + " matrix is zero and epsilon = 0; use epsilon > 0");
  }
  const double z = (1.0 + p) / (2.0 * norm);
  scale(m, static_cast<float>(z));
  copy(x, eye);
  scale(x, static_cast<float>(std::pow(z, 1.0 / p)));

  auto residual = [&]() {
    copy(tmp, m);
    axpby(tmp, eye, -1.0f, 1.0f);
    return std::sqrt(sum_squares(tmp) / static_cast<double>(n));
  };
  double err = residual();
  int it = 0;
  for (; it < options.newton_max_iters && err > options.newton_tol; ++it) {
    copy(prev, x);
    copy(t, eye);
    axpby(t, m, static_cast<float>(-1.0 / p), static_cast<float>((p + 1.0) / p));
    gemm(tmp, x, t);
    copy(x, tmp);
    // tp = T^p by repeated squaring.
    copy(tp, eye);
    copy(tmp, t);
    for (int e = ip; e > 0; e >>= 1) {
      if (e & 1) {
        gemm(work, tp, tmp);
        copy(tp, work);
      }
      if (e > 1) {
        gemm(work, tmp, tmp);
        copy(tmp, work);
      }
    }
    gemm(tmp, tp, m);
    copy(m, tmp);
    double next = residual();
    if (!std::isfinite(next) || (next > 1.2 * err && err < 1e-2)) {
      // Round-off floor reached (or blow-up): the previous iterate is the better answer.
      copy(x, prev);
      break;
    }
    err = next;
  }
  info.iterations = it;
  info.residual = static_cast<float>(err);
  if (!(err < 1e-2) || !all_finite(x)) {
    PRECON_THROW(NumericalError, kOp,
                 "the Newton iteration on a " + size_text(n) + " matrix did not converge in " + std::to_string(it) +
                     " iterations (residual " + std::to_string(err) + "); use root_method = eigh");
  }
  copy(result, x);
}

}  // namespace

InverseRootInfo matrix_inverse_root(Tensor out, const Tensor& a, const InverseRootOptions& options) {
  Device device = require_same_device(kOp, {&out, &a});
  require_dtype(kOp, "A", a, {DType::f32});
  require_dtype(kOp, "out", out, {DType::f32});
  require_ndim(kOp, "A", a, {2});
  if (a.shape[0] != a.shape[1]) shape_error(kOp, "A must be square, got " + a.describe());
  require_contiguous(kOp, "A", a);
  require_contiguous(kOp, "out", out);
  require_same_shape(kOp, "out", out, "A", a);
  if (!(options.root > 0.0)) PRECON_THROW(UnsupportedError, kOp, "root p must be > 0");
  if (!(options.epsilon >= 0.0f)) PRECON_THROW(UnsupportedError, kOp, "epsilon must be >= 0");
  if (!all_finite(a)) PRECON_THROW(NonFiniteError, kOp, "input " + a.describe() + " contains NaN or Inf");
  InverseRootInfo info;
  const int64_t n = a.shape[0];
  if (n == 0) return info;
  // Computed into scratch first so `out` keeps the previous root when this throws.
  Tensor result = scratch(device, 7, {n, n});
  if (options.method == RootMethod::eigh) root_by_eigh(result, a, options, info);
  else root_by_newton(result, a, options, info);
  if (!all_finite(result)) {
    PRECON_THROW(NumericalError, kOp, "the root of a " + size_text(n) + " matrix is not finite");
  }
  copy(out, result);
  return info;
}

}  // namespace precon::kernels
