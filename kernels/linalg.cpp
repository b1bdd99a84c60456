// Front-ends of the linear-algebra primitives: validate, then dispatch on the device.
#include "kernels/linalg.h"

#include <cmath>

#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/dispatch.h"

namespace precon::kernels {

namespace {

int64_t rows_of(const Tensor& t, Trans trans) { return trans == Trans::no ? t.size(-2) : t.size(-1); }
int64_t cols_of(const Tensor& t, Trans trans) { return trans == Trans::no ? t.size(-1) : t.size(-2); }

void require_gemm_dtypes(const char* op, Device device, const Tensor& c, const Tensor& a, const Tensor& b) {
  if (device == Device::cpu) {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&a, &b, &c}) require_dtype(op, "operand", *t, {DType::f32});
  } else {
    require_dtype(op, "A", a, {DType::f32, DType::bf16});
    require_dtype(op, "B", b, {a.dtype});
    if (a.dtype == DType::f32) require_dtype(op, "C", c, {DType::f32});
    else require_dtype(op, "C", c, {DType::bf16, DType::f32});
  }
}

}  // namespace

void gemm(Tensor c, const Tensor& a, const Tensor& b, Trans trans_a, Trans trans_b, float alpha, float beta) {
  const char* op = "gemm";
  Device device = require_same_device(op, {&c, &a, &b});
  require_gemm_dtypes(op, device, c, a, b);
  require_ndim(op, "A", a, {2, 3});
  require_ndim(op, "B", b, {a.ndim});
  require_ndim(op, "C", c, {a.ndim});
  if (a.ndim == 3) {
    if (b.shape[0] != a.shape[0] || c.shape[0] != a.shape[0])
      shape_error(op, "batch sizes differ: A " + a.describe() + ", B " + b.describe() + ", C " + c.describe());
    for (const Tensor* t : std::initializer_list<const Tensor*>{&a, &b, &c}) require_contiguous(op, "batched operand", *t);
  } else {
    require_matrix(op, "A", a);
    require_matrix(op, "B", b);
    require_matrix(op, "C", c);
  }
  int64_t m = rows_of(a, trans_a), k = cols_of(a, trans_a), n = cols_of(b, trans_b);
  if (rows_of(b, trans_b) != k || c.size(-2) != m || c.size(-1) != n) {
    shape_error(op, "cannot multiply A " + a.describe() + (trans_a == Trans::yes ? "ᵀ" : "") + " by B " +
                        b.describe() + (trans_b == Trans::yes ? "ᵀ" : "") + " into C " + c.describe());
  }
  if (c.numel() == 0) return;
  PRECON_DISPATCH(device, gemm, c, a, b, trans_a, trans_b, alpha, beta);
}

void syrk(Tensor c, const Tensor& a, Trans trans, float alpha, float beta) {
  const char* op = "syrk";
  Device device = require_same_device(op, {&c, &a});
  require_gemm_dtypes(op, device, c, a, a);
  require_matrix(op, "A", a);
  require_matrix(op, "C", c);
  int64_t n = rows_of(a, trans);
  if (c.shape[0] != n || c.shape[1] != n)
    shape_error(op, "C " + c.describe() + " must be " + std::to_string(n) + "x" + std::to_string(n) + " for A " +
                        a.describe());
  if (c.numel() == 0) return;
  PRECON_DISPATCH(device, syrk, c, a, trans, alpha, beta);
}

void axpby(Tensor y, const Tensor& x, float alpha, float beta) {
  const char* op = "axpby";
  Device device = require_same_device(op, {&y, &x});
  require_float(op, "y", y);
  require_dtype(op, "x", x, {y.dtype});
  require_same_shape(op, "x", x, "y", y);
  require_contiguous(op, "x", x);
  require_contiguous(op, "y", y);
  if (y.numel() == 0) return;
  PRECON_DISPATCH(device, axpby, y, x, alpha, beta);
}

void cautious_axpby(Tensor y, const Tensor& x, float alpha, float beta) {
  const char* op = "cautious_axpby";
  Device device = require_same_device(op, {&y, &x});
  require_dtype(op, "y", y, {DType::f32});
  require_dtype(op, "x", x, {DType::f32});
  require_same_shape(op, "x", x, "y", y);
  require_contiguous(op, "x", x);
  require_contiguous(op, "y", y);
  if (y.numel() == 0) return;
  PRECON_DISPATCH(device, cautious_axpby, y, x, alpha, beta);
}

void scale(Tensor x, float alpha) {
  require_float("scale", "x", x);
  require_contiguous("scale", "x", x);
  if (x.numel() == 0) return;
  PRECON_DISPATCH(x.device, scale, x, alpha);
}

void add(Tensor out, const Tensor& a, const Tensor& b) {
  const char* op = "add";
  Device device = require_same_device(op, {&out, &a, &b});
  require_float(op, "out", out);
  require_dtype(op, "a", a, {out.dtype});
  require_dtype(op, "b", b, {out.dtype});
  require_same_shape(op, "a", a, "out", out);
  require_same_shape(op, "b", b, "out", out);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&out, &a, &b}) require_contiguous(op, "operand", *t);
  if (out.numel() == 0) return;
  PRECON_DISPATCH(device, add, out, a, b);
}

void copy_strided(Tensor dst, const Tensor& src, float alpha, bool accumulate) {
  const char* op = "copy_strided";
  Device device = require_same_device(op, {&dst, &src});
  if (device == Device::cpu) require_dtype(op, "dst", dst, {DType::f32});
  else require_float(op, "dst", dst);
  require_dtype(op, "src", src, {dst.dtype});
  require_same_shape(op, "src", src, "dst", dst);
  if (dst.ndim < 1 || dst.ndim > 4) shape_error(op, "dst " + dst.describe() + " must have 1 to 4 dims");
  for (int d = 0; d < dst.ndim; ++d)
    if (dst.shape[d] > 1 && dst.strides[d] == 0) shape_error(op, "dst " + dst.describe() + " repeats elements");
  if (dst.numel() == 0) return;
  PRECON_DISPATCH(device, copy_strided, dst, src, alpha, accumulate);
}

void transpose(Tensor out, const Tensor& in) {
  const char* op = "transpose";
  Device device = require_same_device(op, {&out, &in});
  require_float(op, "in", in);
  require_dtype(op, "out", out, {in.dtype});
  require_matrix(op, "in", in);
  require_ndim(op, "out", out, {2});
  require_contiguous(op, "out", out);
  if (out.shape[0] != in.shape[1] || out.shape[1] != in.shape[0])
    shape_error(op, "out " + out.describe() + " is not the transpose shape of " + in.describe());
  if (out.numel() == 0) return;
  PRECON_DISPATCH(device, transpose, out, in);
}

void cast(Tensor out, const Tensor& in) {
  const char* op = "cast";
  Device device = require_same_device(op, {&out, &in});
  require_dtype(op, "in", in, {DType::f32, DType::bf16});
  require_dtype(op, "out", out, {DType::f32, DType::bf16});
  require_numel(op, "out", out, in.numel());
  require_contiguous(op, "in", in);
  require_contiguous(op, "out", out);
  if (out.numel() == 0) return;
  PRECON_DISPATCH(device, cast, out, in);
}

double sum_squares(const Tensor& x) {
  require_float("sum_squares", "x", x);
  require_contiguous("sum_squares", "x", x);
  if (x.numel() == 0) return 0.0;
  return PRECON_DISPATCH(x.device, sum_squares, x);
}

namespace {

// The checks sum_squares_along and scale_along share: a contiguous 2-D f32 x, a dim of 0 or 1 and
// a contiguous f32 vector of x.shape[dim] values on the same device.
Device check_along(const char* op, const Tensor& x, const Tensor& v, const char* v_name, int dim) {
  Device device = require_same_device(op, {&x, &v});
  require_dtype(op, "x", x, {DType::f32});
  require_dtype(op, v_name, v, {DType::f32});
  require_ndim(op, "x", x, {2});
  require_contiguous(op, "x", x);
  require_contiguous(op, v_name, v);
  if (dim != 0 && dim != 1) shape_error(op, "dim must be 0 or 1, got " + std::to_string(dim));
  require_numel(op, v_name, v, x.shape[dim]);
  return device;
}

}  // namespace

void sum_squares_along(Tensor out, const Tensor& x, int dim) {
  Device device = check_along("sum_squares_along", x, out, "out", dim);
  if (out.numel() == 0) return;
  if (x.numel() == 0) {
    fill_zero(out);
    return;
  }
  PRECON_DISPATCH(device, sum_squares_along, out, x, dim);
}

void scale_along(Tensor x, const Tensor& s, int dim) {
  Device device = check_along("scale_along", x, s, "s", dim);
  if (x.numel() == 0) return;
  PRECON_DISPATCH(device, scale_along, x, s, dim);
}

bool all_finite(const Tensor& x) {
  require_float("all_finite", "x", x);
  require_contiguous("all_finite", "x", x);
  if (x.numel() == 0) return true;
  return PRECON_DISPATCH(x.device, all_finite, x);
}

bool symmetric_eigh(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a, bool fp64) {
  const char* op = "symmetric_eigh";
  Device device = require_same_device(op, {&eigenvalues, &eigenvectors, &a});
  for (const Tensor* t : std::initializer_list<const Tensor*>{&eigenvalues, &eigenvectors, &a}) require_dtype(op, "operand", *t, {DType::f32});
  require_ndim(op, "A", a, {2});
  if (a.shape[0] != a.shape[1]) shape_error(op, "A must be square, got " + a.describe());
  require_contiguous(op, "A", a);
  require_same_shape(op, "eigenvectors", eigenvectors, "A", a);
  require_contiguous(op, "eigenvectors", eigenvectors);
  require_numel(op, "eigenvalues", eigenvalues, a.shape[0]);
  if (a.numel() == 0) return true;
  return PRECON_DISPATCH(device, symmetric_eigh, eigenvalues, eigenvectors, a, fp64);
}

void qr_orthonormal(Tensor q, const Tensor& a) {
  const char* op = "qr_orthonormal";
  Device device = require_same_device(op, {&q, &a});
  require_dtype(op, "A", a, {DType::f32});
  require_dtype(op, "Q", q, {DType::f32});
  require_ndim(op, "A", a, {2});
  if (a.shape[0] < a.shape[1]) shape_error(op, "A must have at least as many rows as columns, got " + a.describe());
  require_contiguous(op, "A", a);
  require_same_shape(op, "Q", q, "A", a);
  require_contiguous(op, "Q", q);
  if (a.numel() == 0) return;
  PRECON_DISPATCH(device, qr_orthonormal, q, a);
}

void eigen_reconstruct(Tensor out, const Tensor& q, const std::vector<float>& d) {
  const char* op = "eigen_reconstruct";
  Device device = require_same_device(op, {&out, &q});
  require_dtype(op, "Q", q, {DType::f32});
  require_dtype(op, "out", out, {DType::f32});
  require_ndim(op, "Q", q, {2});
  if (q.shape[0] != q.shape[1]) shape_error(op, "Q must be square, got " + q.describe());
  require_same_shape(op, "out", out, "Q", q);
  require_contiguous(op, "Q", q);
  require_contiguous(op, "out", out);
  if (static_cast<int64_t>(d.size()) != q.shape[0])
    shape_error(op, std::to_string(d.size()) + " eigenvalues for Q " + q.describe());
  for (float x : d)
    if (!(x >= 0.0f) || !std::isfinite(x)) PRECON_THROW(NumericalError, op, "eigenvalue function must be finite and >= 0");
  if (out.numel() == 0) return;
  PRECON_DISPATCH(device, eigen_reconstruct, out, q, d);
}

}  // namespace precon::kernels
