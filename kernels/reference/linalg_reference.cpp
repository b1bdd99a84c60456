#include "kernels/reference/linalg_reference.h"

#include <cmath>

namespace precon::kernels::reference {

Matrix from_float(const std::vector<float>& data, int64_t rows, int64_t cols) {
  Matrix m(rows, cols);
  for (size_t i = 0; i < m.v.size(); ++i) m.v[i] = data[i];
  return m;
}

std::vector<float> to_float(const Matrix& m) { return {m.v.begin(), m.v.end()}; }

Matrix transpose(const Matrix& a) {
  Matrix t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

Matrix matmul(const Matrix& a, const Matrix& b) {
  Matrix c(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k)
      for (int64_t j = 0; j < b.cols; ++j) c(i, j) += a(i, k) * b(k, j);
  return c;
}

Matrix identity(int64_t n) {
  Matrix m(n, n);
  for (int64_t i = 0; i < n; ++i) m(i, i) = 1.0;
  return m;
}

Matrix gemm(const Matrix& a, const Matrix& b, bool trans_a, bool trans_b, double alpha, double beta, const Matrix& c) {
  Matrix p = matmul(trans_a ? transpose(a) : a, trans_b ? transpose(b) : b);
  for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = alpha * p.v[i] + beta * c.v[i];
  return p;
}

Matrix newton_schulz(const Matrix& g, const std::vector<NsCoefficients>& schedule, double eps) {
  const bool tall = g.rows > g.cols;
  Matrix x = tall ? transpose(g) : g;
  double norm = 0;
  for (double e : x.v) norm += e * e;
  norm = std::sqrt(norm) + eps;
  if (norm == 0) return Matrix(g.rows, g.cols);
  for (double& e : x.v) e /= norm;
  for (const NsCoefficients& k : schedule) {
    Matrix a = matmul(x, transpose(x));
    Matrix a2 = matmul(a, a);
    Matrix b(a.rows, a.cols);
    for (size_t i = 0; i < b.v.size(); ++i) b.v[i] = k.b * a.v[i] + k.c * a2.v[i];
    Matrix bx = matmul(b, x);
    for (size_t i = 0; i < x.v.size(); ++i) x.v[i] = k.a * x.v[i] + bx.v[i];
  }
  return tall ? transpose(x) : x;
}

double ns_polynomial(double x, const std::vector<NsCoefficients>& schedule) {
  for (const NsCoefficients& k : schedule) x = k.a * x + k.b * x * x * x + k.c * x * x * x * x * x;
  return x;
}

}  // namespace precon::kernels::reference
