// Dense linear algebra and elementwise primitives. Row-major; 2-D tensors may be strided
// views with unit column stride (a row stride >= cols, as BLAS's leading dimension).
// Each call dispatches on the device of its tensors, which must all agree.
#pragma once

#include <vector>

#include "kernels/tensor.h"

namespace precon::kernels {

enum class Trans : uint8_t { no, yes };

// C = alpha * op(A) op(B) + beta * C.
// CPU: fp32. CUDA: fp32, or bf16 A/B with fp32 accumulation into a bf16 or fp32 C.
// 3-D tensors are a batch of independent products (same batch size on all three).
void gemm(Tensor c, const Tensor& a, const Tensor& b, Trans trans_a = Trans::no,
          Trans trans_b = Trans::no, float alpha = 1.0f, float beta = 0.0f);

// C = alpha * A Aᵀ + beta * C (trans = no) or alpha * Aᵀ A + beta * C (trans = yes).
// C is square and symmetric; the full matrix is written, not one triangle.
void syrk(Tensor c, const Tensor& a, Trans trans = Trans::no, float alpha = 1.0f, float beta = 0.0f);

// y = alpha * x + beta * y (same shape; contiguous).
void axpby(Tensor y, const Tensor& x, float alpha, float beta);
// Cautious weight decay's update: y = alpha·x + beta·y where the step alpha·x and y have opposite
// signs (the step moves y toward zero, as the decay does), y = alpha·x + y elsewhere (no decay).
void cautious_axpby(Tensor y, const Tensor& x, float alpha, float beta);
// x = alpha * x.
void scale(Tensor x, float alpha);
// out = a + b.
void add(Tensor out, const Tensor& a, const Tensor& b);
// out = inᵀ for a 2-D tensor (out shape (cols, rows), contiguous).
void transpose(Tensor out, const Tensor& in);
// Converts between f32 and bf16 (same shape; contiguous).
void cast(Tensor out, const Tensor& in);
// Sum of squares accumulated in double; result returned on the host.
double sum_squares(const Tensor& x);
// Sums of squares along one dim of a 2-D fp32 x (contiguous): out[i] = Σ_j x[i,j]² (dim = 0, one
// per row) or out[j] = Σ_i x[i,j]² (dim = 1, one per column); out (f32) has x.shape[dim] values.
void sum_squares_along(Tensor out, const Tensor& x, int dim);
// x[i,:] *= s[i] (dim = 0) or x[:,j] *= s[j] (dim = 1); s (f32) has x.shape[dim] values.
void scale_along(Tensor x, const Tensor& s, int dim);
// dst = alpha · src (+ dst when accumulate) over equal shapes of up to 4 dims with any element
// strides (narrowed views, a stride-0 source dim broadcasts): splits, packs and pads of head
// layouts. f32 (bf16 too on CUDA); dst's elements must be distinct (no zero stride of a dim > 1).
void copy_strided(Tensor dst, const Tensor& src, float alpha = 1.0f, bool accumulate = false);
// True when every element is finite.
bool all_finite(const Tensor& x);

// Symmetric eigendecomposition A = Q diag(w) Qᵀ of a square fp32 matrix: w ascending (n),
// Q (n, n) with eigenvectors as columns. fp64 = true computes in double internally.
// Returns false (leaving outputs undefined) when the solver reports failure.
bool symmetric_eigh(Tensor eigenvalues, Tensor eigenvectors, const Tensor& a, bool fp64);

// Q of the QR decomposition A = Q R of an fp32 matrix A (m, n), m >= n, by Householder
// reflections (LAPACK's geqrf then orgqr: the signs those give; cuSOLVER's on CUDA): q (m, n)
// with orthonormal columns spanning A's. A and q contiguous; they may be the same tensor.
void qr_orthonormal(Tensor q, const Tensor& a);

// out = Q diag(d) Qᵀ for d >= 0 given on the host (the eigen-reconstruction of a matrix function).
void eigen_reconstruct(Tensor out, const Tensor& q, const std::vector<float>& d);

}  // namespace precon::kernels
