#include "kernels/reference/linalg_reference.h"

#include <algorithm>
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

void symmetric_eigen(const Matrix& a, std::vector<double>& values, Matrix& vectors) {
  const int64_t n = a.rows;
  Matrix m = a;
  vectors = identity(n);
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) (i == j ? total : off) += m(i, j) * m(i, j);
    if (off <= 1e-30 * (total + off)) break;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        if (m(p, q) == 0.0) continue;
        // The rotation that zeroes m(p, q) (Golub & Van Loan, symmetric Schur decomposition).
        const double tau = (m(q, q) - m(p, p)) / (2.0 * m(p, q));
        const double t = (tau >= 0 ? 1.0 : -1.0) / (std::fabs(tau) + std::sqrt(1.0 + tau * tau));
        const double c = 1.0 / std::sqrt(1.0 + t * t), s = t * c;
        for (int64_t k = 0; k < n; ++k) {
          const double mkp = m(k, p), mkq = m(k, q);
          m(k, p) = c * mkp - s * mkq;
          m(k, q) = s * mkp + c * mkq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double mpk = m(p, k), mqk = m(q, k);
          m(p, k) = c * mpk - s * mqk;
          m(q, k) = s * mpk + c * mqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double vkp = vectors(k, p), vkq = vectors(k, q);
          vectors(k, p) = c * vkp - s * vkq;
          vectors(k, q) = s * vkp + c * vkq;
        }
      }
    }
  }
  values.assign(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = m(i, i);
}

Matrix inverse_root(const Matrix& a, double epsilon, double root) {
  const int64_t n = a.rows;
  std::vector<double> lambda;
  Matrix q;
  symmetric_eigen(a, lambda, q);
  Matrix out(n, n);
  for (int64_t k = 0; k < n; ++k) {
    const double d = std::pow(std::max(lambda[static_cast<size_t>(k)], 0.0) + epsilon, -1.0 / root);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) out(i, j) += q(i, k) * d * q(j, k);
  }
  return out;
}

Matrix qr_orthonormal(const Matrix& a) {
  Matrix q = a;
  for (int64_t j = 0; j < q.cols; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < q.rows; ++i) dot += q(i, k) * q(i, j);
      for (int64_t i = 0; i < q.rows; ++i) q(i, j) -= dot * q(i, k);
    }
    double norm = 0;
    for (int64_t i = 0; i < q.rows; ++i) norm += q(i, j) * q(i, j);
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < q.rows; ++i) q(i, j) /= norm;
  }
  return q;
}

}  // namespace precon::kernels::reference
