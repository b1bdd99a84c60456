// GEMM and SYRK on cuBLAS. Our tensors are row-major and cuBLAS is column-major: a row-major
// (m, n) matrix with row stride ld is the column-major (n, m) matrix Mᵀ with the same ld, so
// C = op(A) op(B) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ with the operands swapped.
#include <string>

#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

namespace {

using detail::Scratch;

// One operand of a (batched) product as cuBLAS sees it.
struct Operand {
  const void* ptr;
  int64_t rows, cols;     // of the stored row-major matrix
  int64_t ld;             // row stride
  int64_t batch_stride;   // 0 for a 2-D operand broadcast over the batch
  bool trans;             // the logical operand is the transpose of the stored one
  cudaDataType_t type;
};

// Describes t (2-D or 3-D) as a row-major stored matrix, possibly transposed: a view made by
// Tensor::transposed() has unit row stride and is handled by flipping `trans`.
Operand describe(const Tensor& t, Trans trans, const char* what) {
  int r = t.ndim - 2, c = t.ndim - 1;
  Operand op{t.data, t.shape[r], t.shape[c], 0, t.ndim == 3 ? t.strides[0] : 0, trans == Trans::yes,
             t.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F};
  if (t.shape[c] <= 1 || t.strides[c] == 1) {
    op.ld = t.shape[r] <= 1 ? op.cols : t.strides[r];
  } else if (t.shape[r] <= 1 || t.strides[r] == 1) {
    std::swap(op.rows, op.cols);
    op.ld = t.shape[c] <= 1 ? op.cols : t.strides[c];
    op.trans = !op.trans;
  } else {
    PRECON_THROW(UnsupportedError, "cuda::gemm",
                 std::string(what) + " needs a unit stride in one of its last two dims, got " + t.describe());
  }
  if (op.ld < op.cols) op.ld = op.cols;
  if (op.ld < 1) op.ld = 1;
  return op;
}

Tensor contiguous_f32(const Tensor& t, const Scratch& s) {
  Tensor out = t.ndim == 3 ? s.view({t.shape[0], t.shape[1], t.shape[2]}, DType::f32)
                           : s.view({t.shape[0], t.shape[1]}, DType::f32);
  detail::strided_convert(out, t);
  return out;
}

void gemm_cublas(Tensor c, const Tensor& a, const Tensor& b, Trans trans_a, Trans trans_b, float alpha, float beta) {
  int64_t m = c.size(-2), n = c.size(-1);
  int64_t batch = c.ndim == 3 ? c.shape[0] : 1;
  if (m == 0 || n == 0 || batch == 0) return;
  if (c.strides[c.ndim - 1] != 1 && n > 1) {
    // A transposed output view: Cᵀ = op(B)ᵀ op(A)ᵀ into the row-major storage.
    Trans flip_a = trans_a == Trans::no ? Trans::yes : Trans::no;
    Trans flip_b = trans_b == Trans::no ? Trans::yes : Trans::no;
    gemm_cublas(c.transposed(), b, a, flip_b, flip_a, alpha, beta);
    return;
  }
  Operand oa = describe(a, trans_a, "A"), ob = describe(b, trans_b, "B");
  Operand oc = describe(c, Trans::no, "C");
  int64_t k = oa.trans ? oa.rows : oa.cols;
  cublasOperation_t op_a = oa.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = ob.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    PRECON_CUBLAS_CHECK(cublasGemmEx(detail::cublas(), op_b, op_a, int(n), int(m), int(k), &alpha, ob.ptr, ob.type,
                                     int(ob.ld), oa.ptr, oa.type, int(oa.ld), &beta, c.data, oc.type, int(oc.ld),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    PRECON_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        detail::cublas(), op_b, op_a, int(n), int(m), int(k), &alpha, ob.ptr, ob.type, int(ob.ld), ob.batch_stride,
        oa.ptr, oa.type, int(oa.ld), oa.batch_stride, &beta, c.data, oc.type, int(oc.ld), oc.batch_stride,
        int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

// cuBLAS takes f32 x f32 -> f32 and bf16 x bf16 -> bf16 | f32 directly. Other mixes (an fp32
// activation against a bf16 weight copy, fp32 operands into a bf16 result) go through fp32
// copies, so precision is never lower than the lowest-precision input.
void gemm(Tensor c, const Tensor& a, const Tensor& b, Trans trans_a, Trans trans_b, float alpha, float beta) {
  bool direct = a.dtype == b.dtype && (a.dtype == DType::bf16 || c.dtype == DType::f32);
  if (direct) {
    gemm_cublas(c, a, b, trans_a, trans_b, alpha, beta);
    return;
  }
  bool upcast_a = a.dtype != DType::f32, upcast_b = b.dtype != DType::f32;
  Scratch sa(upcast_a ? a.numel() * sizeof(float) : 0), sb(upcast_b ? b.numel() * sizeof(float) : 0);
  Tensor a32 = upcast_a ? contiguous_f32(a, sa) : a;
  Tensor b32 = upcast_b ? contiguous_f32(b, sb) : b;
  if (c.dtype == DType::f32) {
    gemm_cublas(c, a32, b32, trans_a, trans_b, alpha, beta);
    return;
  }
  Scratch sc(c.numel() * sizeof(float));
  Tensor c32 = c.ndim == 3 ? sc.view({c.shape[0], c.shape[1], c.shape[2]}, DType::f32)
                           : sc.view({c.shape[0], c.shape[1]}, DType::f32);
  if (beta != 0.0f) detail::strided_convert(c32, c);
  gemm_cublas(c32, a32, b32, trans_a, trans_b, alpha, beta);
  detail::strided_convert(c, c32);
}

// fp32 2-D: cublasSsyrk computes one triangle, which is mirrored. Otherwise a GEMM (tensor cores
// for bf16) followed by the same mirror, so the result is exactly symmetric either way.
void syrk(Tensor c, const Tensor& a, Trans trans, float alpha, float beta) {
  int64_t n = c.size(-1);
  if (n == 0) return;
  bool ssyrk = c.ndim == 2 && a.ndim == 2 && a.dtype == DType::f32 && c.dtype == DType::f32 &&
               (c.shape[1] <= 1 || c.strides[1] == 1) && (a.shape[1] <= 1 || a.strides[1] == 1);
  if (!ssyrk) {
    cuda::gemm(c, a, a, trans, trans == Trans::no ? Trans::yes : Trans::no, alpha, beta);
    detail::mirror_upper(c);
    return;
  }
  // Row-major A (n, k) is column-major Aᵀ: A Aᵀ is then op = T; Aᵀ A (A is (k, n)) is op = N.
  int64_t k = trans == Trans::no ? a.shape[1] : a.shape[0];
  int64_t lda = a.shape[0] <= 1 ? a.shape[1] : a.strides[0];
  if (lda < a.shape[1]) lda = a.shape[1];
  if (lda < 1) lda = 1;
  int64_t ldc = n <= 1 ? 1 : c.strides[0];
  cublasOperation_t op = trans == Trans::no ? CUBLAS_OP_T : CUBLAS_OP_N;
  // The column-major lower triangle is the row-major upper one, which mirror_upper copies down.
  PRECON_CUBLAS_CHECK(cublasSsyrk(detail::cublas(), CUBLAS_FILL_MODE_LOWER, op, int(n), int(k), &alpha,
                                  static_cast<const float*>(a.data), int(lda), &beta, static_cast<float*>(c.data),
                                  int(ldc)));
  detail::mirror_upper(c);
}

}  // namespace precon::kernels::cuda
