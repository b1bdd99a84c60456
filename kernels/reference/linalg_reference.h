// Naive double-precision references for the linear-algebra kernels: plain loops, no BLAS.
// They are the yardstick for the fast paths' tests and stay in the tree as the fallback to read.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/newton_schulz.h"

namespace precon::kernels::reference {

// Row-major dense matrix in double.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), v(size_t(r) * c, 0.0) {}
  double& operator()(int64_t i, int64_t j) { return v[size_t(i) * cols + j]; }
  double operator()(int64_t i, int64_t j) const { return v[size_t(i) * cols + j]; }
};

Matrix from_float(const std::vector<float>& data, int64_t rows, int64_t cols);
std::vector<float> to_float(const Matrix& m);
Matrix transpose(const Matrix& a);
Matrix matmul(const Matrix& a, const Matrix& b);
Matrix identity(int64_t n);

// C = alpha op(A) op(B) + beta C
Matrix gemm(const Matrix& a, const Matrix& b, bool trans_a, bool trans_b, double alpha, double beta, const Matrix& c);

// The Newton–Schulz iteration exactly as written in docs/design.md, Newton–Schulz, in double,
// general products.
Matrix newton_schulz(const Matrix& g, const std::vector<NsCoefficients>& schedule, double eps);

// The scalar polynomial composition p_K(…p_1(x)) that Newton–Schulz applies to singular values.
double ns_polynomial(double x, const std::vector<NsCoefficients>& schedule);

// Eigenvalues and eigenvectors (columns of `vectors`) of a symmetric matrix by cyclic Jacobi
// rotations in double: slow, independent of LAPACK, accurate to a few ulps of double.
void symmetric_eigen(const Matrix& a, std::vector<double>& values, Matrix& vectors);

// Orthonormal columns Q spanning those of A (m >= n, full column rank) by modified Gram–Schmidt
// in double, R's diagonal positive: Householder's Q up to the sign of each column.
Matrix qr_orthonormal(const Matrix& a);

// (A + εI)^(-1/p) = Q diag((max(λ, 0) + ε)^(-1/p)) Qᵀ from symmetric_eigen.
Matrix inverse_root(const Matrix& a, double epsilon, double root);

}  // namespace precon::kernels::reference
