// Front-end of the NN ops: validates arguments, then dispatches to the backend.
// Dtype rules: on CPU every floating tensor is fp32. On CUDA activations and their gradients
// share one dtype (fp32 or bf16) per call, parameters and their gradients are each fp32 or bf16,
// and saved statistics (mean, rstd, losses) are fp32. Token and target tensors are i32.
// Optional d-outputs: a backward skips a parameter gradient (and matmul/layernorm/rmsnorm's dinp)
// given as an empty Tensor (data == nullptr).
#include "kernels/nn.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/check.h"
#include "kernels/dispatch.h"
#include "kernels/linalg.h"

namespace precon::kernels {

namespace {

std::string str(int64_t x) { return std::to_string(x); }

bool given(const Tensor& t) { return t.data != nullptr; }

void require_data(const char* op, const char* what, const Tensor& t) {
  if (t.numel() > 0 && !t.data) shape_error(op, std::string(what) + " has no data: " + t.describe());
}

// Exact shape, contiguous, and backed by memory when non-empty.
void require_shape(const char* op, const char* what, const Tensor& t, std::initializer_list<int64_t> shape) {
  bool same = t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) same = same && t.shape[d++] == s;
  if (!same) {
    std::string want;
    for (int64_t s : shape) {
      if (!want.empty()) want += ',';
      want += str(s);
    }
    shape_error(op, std::string(what) + " must have shape [" + want + "], got " + t.describe());
  }
  require_contiguous(op, what, t);
  require_data(op, what, t);
}

// Same shape as ref, same dtype, contiguous, backed by memory.
void require_like(const char* op, const char* what, const Tensor& t, const char* ref_what, const Tensor& ref) {
  require_same_shape(op, what, t, ref_what, ref);
  require_dtype(op, what, t, {ref.dtype});
  require_contiguous(op, what, t);
  require_data(op, what, t);
}

// An activation of shape (N,X) or (B,T,X): returns N, the product of the leading dims.
int64_t rows_of(const char* op, const char* what, const Tensor& t) {
  require_ndim(op, what, t, {2, 3});
  require_float(op, what, t);
  require_contiguous(op, what, t);
  require_data(op, what, t);
  return t.ndim == 2 ? t.shape[0] : t.shape[0] * t.shape[1];
}

// An index tensor (tokens, targets) with n entries, any shape.
void require_indices(const char* op, const char* what, const Tensor& t, int64_t n) {
  require_dtype(op, what, t, {DType::i32});
  require_numel(op, what, t, n);
  require_contiguous(op, what, t);
  require_data(op, what, t);
}

// An fp32 tensor of n elements, any shape (statistics, optimizer state).
void require_f32_numel(const char* op, const char* what, const Tensor& t, int64_t n) {
  require_dtype(op, what, t, {DType::f32});
  require_numel(op, what, t, n);
  require_contiguous(op, what, t);
  require_data(op, what, t);
}

// The device code cannot report a bad index, so host tensors are checked here; device tensors
// are the caller's responsibility (they come from the CPU-validated data loader).
void require_in_range(const char* op, const char* what, const Tensor& t, int32_t lo, int32_t hi) {
  if (t.device != Device::cpu) return;
  const int32_t* p = t.i32();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    if (p[i] < lo || p[i] >= hi)
      shape_error(op, std::string(what) + "[" + str(i) + "] = " + str(p[i]) + " is outside [" + str(lo) + ", " +
                          str(hi) + ")");
}

void require_layernorm_params(const char* op, const Tensor& weight, const Tensor& bias, int64_t C) {
  require_float(op, "weight", weight);
  require_shape(op, "weight", weight, {C});
  require_like(op, "bias", bias, "weight", weight);
}

// t has inp's leading dims and last dim OC.
void require_rows_like(const char* op, const char* what, const Tensor& t, const Tensor& inp, int64_t OC) {
  bool same = t.ndim == inp.ndim && t.shape[t.ndim - 1] == OC;
  for (int d = 0; same && d < inp.ndim - 1; ++d) same = t.shape[d] == inp.shape[d];
  if (!same)
    shape_error(op, std::string(what) + " " + t.describe() + " must have the leading dims of inp " + inp.describe() +
                        " and last dim OC = " + str(OC));
}

// (C, OC) of a weight in the given layout.
void weight_dims(const char* op, const Tensor& weight, WeightLayout layout, int64_t* C, int64_t* OC) {
  require_ndim(op, "weight", weight, {2});
  require_float(op, "weight", weight);
  require_contiguous(op, "weight", weight);
  require_data(op, "weight", weight);
  *C = layout == WeightLayout::in_out ? weight.shape[0] : weight.shape[1];
  *OC = layout == WeightLayout::in_out ? weight.shape[1] : weight.shape[0];
}

// qkv (B,T,3C) with C divisible by n_head; returns C.
int64_t attention_channels(const char* op, const Tensor& qkv, int n_head) {
  require_ndim(op, "qkv", qkv, {3});
  require_float(op, "qkv", qkv);
  require_contiguous(op, "qkv", qkv);
  if (qkv.shape[2] % 3 != 0) shape_error(op, "qkv's last dim must be 3*C, got " + qkv.describe());
  int64_t C = qkv.shape[2] / 3;
  if (n_head <= 0 || C % n_head != 0)
    shape_error(op, "C = " + str(C) + " (from qkv " + qkv.describe() + ") is not divisible by n_head = " +
                        str(n_head));
  require_data(op, "qkv", qkv);
  return C;
}

int64_t crossentropy_rows(const char* op, const Tensor& logits, const Tensor& targets, int vocab_size) {
  int64_t N = rows_of(op, "logits", logits);
  int64_t Vp = logits.shape[logits.ndim - 1];
  if (vocab_size <= 0 || vocab_size > Vp)
    shape_error(op, "vocab_size = " + str(vocab_size) + " must be in [1, Vp] with Vp = " + str(Vp) + " from logits " +
                        logits.describe());
  require_indices(op, "targets", targets, N);
  require_in_range(op, "targets", targets, std::numeric_limits<int32_t>::min(), vocab_size);
  return N;
}

// x (B,T,C) with C = n_head * hd, hd even, and theta > 0: rope's argument checks.
void require_rope_input(const char* op, const char* what, const Tensor& x, int n_head, const Rope& rope) {
  require_ndim(op, what, x, {3});
  require_float(op, what, x);
  require_contiguous(op, what, x);
  require_data(op, what, x);
  const int64_t C = x.shape[2];
  if (n_head <= 0 || C % n_head != 0 || (C / n_head) % 2 != 0)
    shape_error(op, std::string(what) + " " + x.describe() + ": the last dim must be n_head = " + str(n_head) +
                        " heads of an even head dim");
  if (!(rope.theta > 0.0) || !std::isfinite(rope.theta))
    PRECON_THROW(UnsupportedError, op,
                 "theta = " + std::to_string(rope.theta) + " must be finite and > 0 (Llama uses 10000 or 500000)");
  if (!(rope.factor >= 1.0) || !std::isfinite(rope.factor) || !(rope.attention_factor > 0.0) ||
      !std::isfinite(rope.attention_factor))
    PRECON_THROW(UnsupportedError, op,
                 "YaRN factor = " + std::to_string(rope.factor) + " must be finite and >= 1, attention_factor = " +
                     std::to_string(rope.attention_factor) + " finite and > 0");
  if (rope.factor > 1.0 && !(rope.original_max > 0.0 && rope.beta_fast > rope.beta_slow && rope.beta_slow > 0.0 &&
                             std::isfinite(rope.original_max) && std::isfinite(rope.beta_fast)))
    PRECON_THROW(UnsupportedError, op,
                 "YaRN needs original_max > 0 (" + std::to_string(rope.original_max) + ") and beta_fast > beta_slow > 0 (" +
                     std::to_string(rope.beta_fast) + ", " + std::to_string(rope.beta_slow) + ")");
}

// q (B,T,NH·hd), k and v (B,T,NKV·hd), qkv (B,T,3·NH·hd), one dtype, NKV dividing NH: qkv_pack's
// argument checks (names differ between the forward and the backward).
void require_qkv_pack(const char* op, const char* names[4], const Tensor* t[4], int n_head, int n_kv_head) {
  const Tensor& q = *t[0];
  require_ndim(op, names[0], q, {3});
  require_float(op, names[0], q);
  const int64_t B = q.shape[0], T = q.shape[1], C = q.shape[2];
  if (n_head <= 0 || C % n_head != 0)
    shape_error(
        op, std::string(names[0]) + " " + q.describe() + ": the last dim is not divisible by n_head = " + str(n_head));
  if (n_kv_head <= 0 || n_head % n_kv_head != 0)
    shape_error(op, "n_kv_head = " + str(n_kv_head) + " must divide n_head = " + str(n_head));
  const int64_t Ckv = C / n_head * n_kv_head;
  require_shape(op, names[0], q, {B, T, C});
  for (int i = 1; i < 4; ++i) {
    require_dtype(op, names[i], *t[i], {q.dtype});
    require_shape(op, names[i], *t[i], {B, T, i < 3 ? Ckv : 3 * C});
  }
}

// probs (N,E) f32, topk_idx (N,K) i32 and topk_w (N,K) f32 with 1 <= K <= E: the routing that
// moe_router_forward writes and moe_router_backward reads. Returns {N, E, K}.
struct MoeRouting {
  int64_t N, E, K;
};
MoeRouting require_moe_routing(const char* op, const Tensor& probs, const Tensor& topk_idx, const Tensor& topk_w) {
  require_ndim(op, "probs", probs, {2});
  require_dtype(op, "probs", probs, {DType::f32});
  const int64_t N = probs.shape[0], E = probs.shape[1];
  require_shape(op, "probs", probs, {N, E});
  require_ndim(op, "topk_idx", topk_idx, {2});
  const int64_t K = topk_idx.shape[1];
  if (K < 1 || K > E)
    shape_error(op, "K = " + str(K) + " (topk_idx " + topk_idx.describe() + ") must be in [1, E = " + str(E) +
                        "] (E from probs " + probs.describe() + ")");
  require_dtype(op, "topk_idx", topk_idx, {DType::i32});
  require_shape(op, "topk_idx", topk_idx, {N, K});
  require_dtype(op, "topk_w", topk_w, {DType::f32});
  require_shape(op, "topk_w", topk_w, {N, K});
  return {N, E, K};
}

// A 2-D activation (rows, C): f32, or bf16 on a GPU. Returns the number of rows.
int64_t require_rows_2d(const char* op, const char* what, const Tensor& t) {
  require_ndim(op, what, t, {2});
  require_float(op, what, t);
  require_contiguous(op, what, t);
  require_data(op, what, t);
  return t.shape[0];
}

// The device code relies on distinct entries (it adds without atomics), so host tensors are
// checked here, as require_in_range does; t's entries must already lie in [0, n).
void require_distinct(const char* op, const char* what, const Tensor& t, int64_t n) {
  if (t.device != Device::cpu) return;
  std::vector<char> seen(static_cast<size_t>(n), 0);
  const int32_t* p = t.i32();
  for (int64_t i = 0, m = t.numel(); i < m; ++i) {
    if (seen[p[i]])
      shape_error(op, std::string(what) + "[" + str(i) + "] = " + str(p[i]) +
                          " repeats an earlier entry: each row may be named once");
    seen[p[i]] = 1;
  }
}

}  // namespace

void encoder_forward(Tensor out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const char* op = "encoder_forward";
  Device device = require_same_device(op, {&out, &tokens, &wte, &wpe});
  require_ndim(op, "tokens", tokens, {2});
  require_ndim(op, "wte", wte, {2});
  require_ndim(op, "wpe", wpe, {2});
  int64_t B = tokens.shape[0], T = tokens.shape[1], Vp = wte.shape[0], C = wte.shape[1];
  require_indices(op, "tokens", tokens, B * T);
  require_float(op, "wte", wte);
  require_shape(op, "wte", wte, {Vp, C});
  require_float(op, "out", out);
  require_shape(op, "out", out, {B, T, C});
  require_dtype(op, "wpe", wpe, {wte.dtype});
  require_contiguous(op, "wpe", wpe);
  if (wpe.shape[1] != C || wpe.shape[0] < T)
    shape_error(op, "wpe " + wpe.describe() + " must be (maxT >= " + str(T) + ", " + str(C) + ")");
  if (out.numel() == 0) return;
  require_in_range(op, "tokens", tokens, 0, static_cast<int32_t>(Vp));
  PRECON_DISPATCH(device, encoder_forward, out, tokens, wte, wpe);
}

void encoder_backward(Tensor dwte, Tensor dwpe, const Tensor& dout, const Tensor& tokens) {
  const char* op = "encoder_backward";
  Device device = require_same_device(op, {&dwte, &dwpe, &dout, &tokens});
  require_ndim(op, "dout", dout, {3});
  require_float(op, "dout", dout);
  int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  require_shape(op, "dout", dout, {B, T, C});
  require_indices(op, "tokens", tokens, B * T);
  require_ndim(op, "tokens", tokens, {2});
  if (given(dwte)) {
    require_float(op, "dwte", dwte);
    require_ndim(op, "dwte", dwte, {2});
    require_shape(op, "dwte", dwte, {dwte.shape[0], C});
  }
  if (given(dwpe)) {
    require_float(op, "dwpe", dwpe);
    require_ndim(op, "dwpe", dwpe, {2});
    if (dwpe.shape[1] != C || dwpe.shape[0] < T)
      shape_error(op, "dwpe " + dwpe.describe() + " must be (maxT >= " + str(T) + ", " + str(C) + ")");
    require_contiguous(op, "dwpe", dwpe);
  }
  if (dout.numel() == 0 || (!given(dwte) && !given(dwpe))) return;
  if (given(dwte)) require_in_range(op, "tokens", tokens, 0, static_cast<int32_t>(dwte.shape[0]));
  PRECON_DISPATCH(device, encoder_backward, dwte, dwpe, dout, tokens);
}

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias) {
  const char* op = "layernorm_forward";
  Device device = require_same_device(op, {&out, &mean, &rstd, &inp, &weight, &bias});
  int64_t N = rows_of(op, "inp", inp);
  int64_t C = inp.shape[inp.ndim - 1];
  require_like(op, "out", out, "inp", inp);
  require_f32_numel(op, "mean", mean, N);
  require_f32_numel(op, "rstd", rstd, N);
  require_layernorm_params(op, weight, bias, C);
  if (inp.numel() == 0) return;
  PRECON_DISPATCH(device, layernorm_forward, out, mean, rstd, inp, weight, bias);
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  Device device = require_same_device(op, {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
  int64_t N = rows_of(op, "inp", inp);
  int64_t C = inp.shape[inp.ndim - 1];
  require_like(op, "dout", dout, "inp", inp);
  if (given(dinp)) require_like(op, "dinp", dinp, "inp", inp);
  require_f32_numel(op, "mean", mean, N);
  require_f32_numel(op, "rstd", rstd, N);
  require_float(op, "weight", weight);
  require_shape(op, "weight", weight, {C});
  if (given(dweight)) {
    require_float(op, "dweight", dweight);
    require_shape(op, "dweight", dweight, {C});
  }
  if (given(dbias)) {
    require_float(op, "dbias", dbias);
    require_shape(op, "dbias", dbias, {C});
  }
  if (inp.numel() == 0) return;
  PRECON_DISPATCH(device, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}

void gelu_forward(Tensor out, const Tensor& inp) {
  const char* op = "gelu_forward";
  Device device = require_same_device(op, {&out, &inp});
  require_float(op, "inp", inp);
  require_contiguous(op, "inp", inp);
  require_data(op, "inp", inp);
  require_like(op, "out", out, "inp", inp);
  if (inp.numel() == 0) return;
  PRECON_DISPATCH(device, gelu_forward, out, inp);
}

void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  Device device = require_same_device(op, {&dinp, &inp, &dout});
  require_float(op, "inp", inp);
  require_contiguous(op, "inp", inp);
  require_data(op, "inp", inp);
  require_like(op, "dout", dout, "inp", inp);
  require_like(op, "dinp", dinp, "inp", inp);
  if (inp.numel() == 0) return;
  PRECON_DISPATCH(device, gelu_backward, dinp, inp, dout);
}

void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte) {
  const char* op = "embedding_forward";
  Device device = require_same_device(op, {&out, &tokens, &wte});
  require_ndim(op, "tokens", tokens, {2});
  require_ndim(op, "wte", wte, {2});
  int64_t B = tokens.shape[0], T = tokens.shape[1], Vp = wte.shape[0], C = wte.shape[1];
  require_indices(op, "tokens", tokens, B * T);
  require_float(op, "wte", wte);
  require_shape(op, "wte", wte, {Vp, C});
  require_float(op, "out", out);
  require_shape(op, "out", out, {B, T, C});
  if (out.numel() == 0) return;
  require_in_range(op, "tokens", tokens, 0, static_cast<int32_t>(Vp));
  PRECON_DISPATCH(device, embedding_forward, out, tokens, wte);
}

void embedding_backward(Tensor dwte, const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_backward";
  Device device = require_same_device(op, {&dwte, &dout, &tokens});
  require_ndim(op, "dout", dout, {3});
  require_float(op, "dout", dout);
  int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  require_shape(op, "dout", dout, {B, T, C});
  require_ndim(op, "tokens", tokens, {2});
  require_indices(op, "tokens", tokens, B * T);
  require_float(op, "dwte", dwte);
  require_ndim(op, "dwte", dwte, {2});
  require_shape(op, "dwte", dwte, {dwte.shape[0], C});
  if (dout.numel() == 0) return;
  require_in_range(op, "tokens", tokens, 0, static_cast<int32_t>(dwte.shape[0]));
  PRECON_DISPATCH(device, embedding_backward, dwte, dout, tokens);
}

void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& inp, const Tensor& weight, float eps) {
  const char* op = "rmsnorm_forward";
  Device device = require_same_device(op, {&out, &rstd, &inp, &weight});
  int64_t N = rows_of(op, "inp", inp);
  int64_t C = inp.shape[inp.ndim - 1];
  require_like(op, "out", out, "inp", inp);
  require_f32_numel(op, "rstd", rstd, N);
  require_float(op, "weight", weight);
  require_shape(op, "weight", weight, {C});
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    PRECON_THROW(UnsupportedError, op,
                 "eps = " + std::to_string(eps) + " must be finite and >= 0 (Llama uses 1e-5 or 1e-6)");
  if (inp.numel() == 0) return;
  PRECON_DISPATCH(device, rmsnorm_forward, out, rstd, inp, weight, eps);
}

void rmsnorm_backward(Tensor dinp, Tensor dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  Device device = require_same_device(op, {&dinp, &dweight, &dout, &inp, &weight, &rstd});
  int64_t N = rows_of(op, "inp", inp);
  int64_t C = inp.shape[inp.ndim - 1];
  require_like(op, "dout", dout, "inp", inp);
  if (given(dinp)) require_like(op, "dinp", dinp, "inp", inp);
  require_f32_numel(op, "rstd", rstd, N);
  require_float(op, "weight", weight);
  require_shape(op, "weight", weight, {C});
  if (given(dweight)) {
    require_float(op, "dweight", dweight);
    require_shape(op, "dweight", dweight, {C});
  }
  if (inp.numel() == 0 || (!given(dinp) && !given(dweight))) return;
  PRECON_DISPATCH(device, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd);
}

void rope_forward(Tensor x, int n_head, const Rope& rope) {
  const char* op = "rope_forward";
  require_rope_input(op, "x", x, n_head, rope);
  if (x.numel() == 0) return;
  PRECON_DISPATCH(x.device, rope_forward, x, n_head, rope);
}

void rope_backward(Tensor dx, int n_head, const Rope& rope) {
  const char* op = "rope_backward";
  require_rope_input(op, "dx", dx, n_head, rope);
  if (dx.numel() == 0) return;
  PRECON_DISPATCH(dx.device, rope_backward, dx, n_head, rope);
}

void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  Device device = require_same_device(op, {&out, &gate, &up});
  rows_of(op, "gate", gate);
  require_like(op, "up", up, "gate", gate);
  require_like(op, "out", out, "gate", gate);
  if (gate.numel() == 0) return;
  PRECON_DISPATCH(device, swiglu_forward, out, gate, up);
}

void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_backward";
  Device device = require_same_device(op, {&dgate, &dup, &dout, &gate, &up});
  rows_of(op, "gate", gate);
  require_like(op, "up", up, "gate", gate);
  require_like(op, "dout", dout, "gate", gate);
  require_like(op, "dgate", dgate, "gate", gate);
  require_like(op, "dup", dup, "gate", gate);
  if (gate.numel() == 0) return;
  PRECON_DISPATCH(device, swiglu_backward, dgate, dup, dout, gate, up);
}

void qkv_pack_forward(Tensor qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  const char* op = "qkv_pack_forward";
  Device device = require_same_device(op, {&qkv, &q, &k, &v});
  const char* names[4] = {"q", "k", "v", "qkv"};
  const Tensor* tensors[4] = {&q, &k, &v, &qkv};
  require_qkv_pack(op, names, tensors, n_head, n_kv_head);
  if (qkv.numel() == 0) return;
  PRECON_DISPATCH(device, qkv_pack_forward, qkv, q, k, v, n_head, n_kv_head);
}

void qkv_pack_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dqkv, int n_head, int n_kv_head) {
  const char* op = "qkv_pack_backward";
  Device device = require_same_device(op, {&dq, &dk, &dv, &dqkv});
  const char* names[4] = {"dq", "dk", "dv", "dqkv"};
  const Tensor* tensors[4] = {&dq, &dk, &dv, &dqkv};
  require_qkv_pack(op, names, tensors, n_head, n_kv_head);
  if (dqkv.numel() == 0) return;
  PRECON_DISPATCH(device, qkv_pack_backward, dq, dk, dv, dqkv, n_head, n_kv_head);
}

void moe_router_forward(Tensor probs, Tensor topk_idx, Tensor topk_w, const Tensor& logits) {
  const char* op = "moe_router_forward";
  Device device = require_same_device(op, {&probs, &topk_idx, &topk_w, &logits});
  const MoeRouting r = require_moe_routing(op, probs, topk_idx, topk_w);
  require_dtype(op, "logits", logits, {DType::f32});
  require_shape(op, "logits", logits, {r.N, r.E});
  if (r.N == 0) return;
  PRECON_DISPATCH(device, moe_router_forward, probs, topk_idx, topk_w, logits);
}

void moe_router_backward(Tensor dlogits, const Tensor& dw, const Tensor& probs, const Tensor& topk_idx,
                         const Tensor& topk_w, const Tensor& aux_dprobs) {
  const char* op = "moe_router_backward";
  Device device = require_same_device(op, {&dlogits, &dw, &probs, &topk_idx, &topk_w, &aux_dprobs});
  const MoeRouting r = require_moe_routing(op, probs, topk_idx, topk_w);
  require_dtype(op, "dlogits", dlogits, {DType::f32});
  require_shape(op, "dlogits", dlogits, {r.N, r.E});
  require_dtype(op, "dw", dw, {DType::f32});
  require_shape(op, "dw", dw, {r.N, r.K});
  if (given(aux_dprobs)) {
    require_dtype(op, "aux_dprobs", aux_dprobs, {DType::f32});
    require_shape(op, "aux_dprobs", aux_dprobs, {r.E});
  }
  if (r.N == 0) return;
  require_in_range(op, "topk_idx", topk_idx, 0, static_cast<int32_t>(r.E));
  PRECON_DISPATCH(device, moe_router_backward, dlogits, dw, probs, topk_idx, topk_w, aux_dprobs);
}

void gather_rows(Tensor out, const Tensor& inp, const Tensor& rows) {
  const char* op = "gather_rows";
  Device device = require_same_device(op, {&out, &inp, &rows});
  const int64_t N = require_rows_2d(op, "inp", inp), C = inp.shape[1];
  const int64_t M = require_rows_2d(op, "out", out);
  require_dtype(op, "out", out, {inp.dtype});
  require_shape(op, "out", out, {M, C});
  require_dtype(op, "rows", rows, {DType::i32});
  require_shape(op, "rows", rows, {M});
  if (out.numel() == 0) return;
  require_in_range(op, "rows", rows, 0, static_cast<int32_t>(N));
  PRECON_DISPATCH(device, gather_rows, out, inp, rows);
}

void scatter_add_rows(Tensor dinp, const Tensor& dout, const Tensor& rows) {
  const char* op = "scatter_add_rows";
  Device device = require_same_device(op, {&dinp, &dout, &rows});
  const int64_t N = require_rows_2d(op, "dinp", dinp), C = dinp.shape[1];
  const int64_t M = require_rows_2d(op, "dout", dout);
  require_dtype(op, "dout", dout, {dinp.dtype});
  require_shape(op, "dout", dout, {M, C});
  require_dtype(op, "rows", rows, {DType::i32});
  require_shape(op, "rows", rows, {M});
  if (dout.numel() == 0) return;
  require_in_range(op, "rows", rows, 0, static_cast<int32_t>(N));
  PRECON_DISPATCH(device, scatter_add_rows, dinp, dout, rows);
}

void moe_combine_forward(Tensor out, const Tensor& y, const Tensor& pos, const Tensor& w) {
  const char* op = "moe_combine_forward";
  Device device = require_same_device(op, {&out, &y, &pos, &w});
  const int64_t M = require_rows_2d(op, "y", y), C = y.shape[1];
  const int64_t N = require_rows_2d(op, "out", out);
  require_dtype(op, "out", out, {y.dtype});
  require_shape(op, "out", out, {N, C});
  require_ndim(op, "w", w, {2});
  const int64_t K = w.shape[1];
  require_dtype(op, "w", w, {DType::f32});
  require_shape(op, "w", w, {N, K});
  require_dtype(op, "pos", pos, {DType::i32});
  require_shape(op, "pos", pos, {N, K});
  if (out.numel() == 0) return;
  require_in_range(op, "pos", pos, 0, static_cast<int32_t>(M));
  PRECON_DISPATCH(device, moe_combine_forward, out, y, pos, w);
}

void moe_combine_backward(Tensor dy, Tensor dw, const Tensor& dout, const Tensor& y, const Tensor& pos,
                          const Tensor& w) {
  const char* op = "moe_combine_backward";
  Device device = require_same_device(op, {&dy, &dw, &dout, &y, &pos, &w});
  const int64_t M = require_rows_2d(op, "y", y), C = y.shape[1];
  require_like(op, "dy", dy, "y", y);
  const int64_t N = require_rows_2d(op, "dout", dout);
  require_dtype(op, "dout", dout, {y.dtype});
  require_shape(op, "dout", dout, {N, C});
  require_ndim(op, "w", w, {2});
  const int64_t K = w.shape[1];
  require_dtype(op, "w", w, {DType::f32});
  require_shape(op, "w", w, {N, K});
  require_dtype(op, "dw", dw, {DType::f32});
  require_shape(op, "dw", dw, {N, K});
  require_dtype(op, "pos", pos, {DType::i32});
  require_shape(op, "pos", pos, {N, K});
  if (dout.numel() == 0 || w.numel() == 0) return;
  require_in_range(op, "pos", pos, 0, static_cast<int32_t>(M));
  require_distinct(op, "pos", pos, M);
  PRECON_DISPATCH(device, moe_combine_backward, dy, dw, dout, y, pos, w);
}

void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout) {
  const char* op = "matmul_forward";
  Device device = require_same_device(op, {&out, &inp, &weight, &bias});
  rows_of(op, "inp", inp);
  int64_t C, OC;
  weight_dims(op, weight, layout, &C, &OC);
  if (inp.shape[inp.ndim - 1] != C)
    shape_error(op, "inp " + inp.describe() + " does not fit weight " + weight.describe() + " (" +
                        (layout == WeightLayout::in_out ? "in_out (C,OC)" : "out_in (OC,C)") + ")");
  rows_of(op, "out", out);
  require_dtype(op, "out", out, {inp.dtype});
  require_rows_like(op, "out", out, inp, OC);
  if (given(bias)) {
    require_float(op, "bias", bias);
    require_shape(op, "bias", bias, {OC});
  }
  if (out.numel() == 0) return;
  PRECON_DISPATCH(device, matmul_forward, out, inp, weight, bias, layout);
}

void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight, WeightLayout layout) {
  const char* op = "matmul_backward";
  Device device = require_same_device(op, {&dinp, &dweight, &dbias, &dout, &inp, &weight});
  rows_of(op, "inp", inp);
  int64_t C, OC;
  weight_dims(op, weight, layout, &C, &OC);
  if (inp.shape[inp.ndim - 1] != C)
    shape_error(op, "inp " + inp.describe() + " does not fit weight " + weight.describe() + " (" +
                        (layout == WeightLayout::in_out ? "in_out (C,OC)" : "out_in (OC,C)") + ")");
  rows_of(op, "dout", dout);
  require_dtype(op, "dout", dout, {inp.dtype});
  require_rows_like(op, "dout", dout, inp, OC);
  if (given(dinp)) require_like(op, "dinp", dinp, "inp", inp);
  if (given(dweight)) {
    require_float(op, "dweight", dweight);
    require_same_shape(op, "dweight", dweight, "weight", weight);
    require_contiguous(op, "dweight", dweight);
  }
  if (given(dbias)) {
    require_float(op, "dbias", dbias);
    require_shape(op, "dbias", dbias, {OC});
  }
  if (dout.numel() == 0) return;
  PRECON_DISPATCH(device, matmul_backward, dinp, dweight, dbias, dout, inp, weight, layout);
}

void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head, Tensor row_max) {
  const char* op = "attention_forward";
  Device device = require_same_device(op, {&out, &att, &qkv});
  int64_t C = attention_channels(op, qkv, n_head);
  int64_t B = qkv.shape[0], T = qkv.shape[1];
  require_dtype(op, "out", out, {qkv.dtype});
  require_shape(op, "out", out, {B, T, C});
  require_dtype(op, "att", att, {qkv.dtype});
  require_shape(op, "att", att, {B, n_head, T, T});
  if (row_max.data) {
    require_same_device(op, {&row_max, &qkv});
    require_dtype(op, "row_max", row_max, {DType::f32});
    require_shape(op, "row_max", row_max, {B, n_head, T});
  }
  if (out.numel() == 0) return;
  PRECON_DISPATCH(device, attention_forward, out, att, qkv, n_head, row_max);
}

void attention_backward(Tensor dqkv, Tensor datt, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head) {
  const char* op = "attention_backward";
  Device device = require_same_device(op, {&dqkv, &datt, &dout, &qkv, &att});
  int64_t C = attention_channels(op, qkv, n_head);
  int64_t B = qkv.shape[0], T = qkv.shape[1];
  require_like(op, "dqkv", dqkv, "qkv", qkv);
  require_dtype(op, "dout", dout, {qkv.dtype});
  require_shape(op, "dout", dout, {B, T, C});
  require_dtype(op, "att", att, {qkv.dtype});
  require_shape(op, "att", att, {B, n_head, T, T});
  require_like(op, "datt", datt, "att", att);
  if (dout.numel() == 0) return;
  PRECON_DISPATCH(device, attention_backward, dqkv, datt, dout, qkv, att, n_head);
}

void crossentropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets, int vocab_size) {
  const char* op = "crossentropy_forward";
  Device device = require_same_device(op, {&losses, &logits, &targets});
  int64_t N = crossentropy_rows(op, logits, targets, vocab_size);
  require_f32_numel(op, "losses", losses, N);
  if (N == 0) return;
  PRECON_DISPATCH(device, crossentropy_forward, losses, logits, targets, vocab_size);
}

void crossentropy_backward(Tensor dlogits, Tensor losses, const Tensor& logits, const Tensor& targets,
                           int vocab_size, float dloss) {
  const char* op = "crossentropy_backward";
  Device device = require_same_device(op, {&dlogits, &losses, &logits, &targets});
  int64_t N = crossentropy_rows(op, logits, targets, vocab_size);
  require_f32_numel(op, "losses", losses, N);
  require_like(op, "dlogits", dlogits, "logits", logits);
  if (N == 0) return;
  PRECON_DISPATCH(device, crossentropy_backward, dlogits, losses, logits, targets, vocab_size, dloss);
}

void adamw_update(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& hp) {
  const char* op = "adamw_update";
  Device device = require_same_device(op, {&params, &grads, &m, &v});
  require_dtype(op, "params", params, {DType::f32});
  require_contiguous(op, "params", params);
  int64_t n = params.numel();
  for (auto [what, t] : {std::pair<const char*, const Tensor*>{"grads", &grads}, {"m", &m}, {"v", &v}}) {
    require_f32_numel(op, what, *t, n);
  }
  require_data(op, "params", params);
  if (!(hp.beta1 >= 0.0f && hp.beta1 < 1.0f) || !(hp.beta2 >= 0.0f && hp.beta2 < 1.0f) || !(hp.eps >= 0.0f) ||
      (hp.bias_correction && hp.step < 1))
    PRECON_THROW(UnsupportedError, op,
                 "hyper-parameters out of range: beta1 = " + std::to_string(hp.beta1) + ", beta2 = " +
                     std::to_string(hp.beta2) + ", eps = " + std::to_string(hp.eps) + ", step = " + str(hp.step) +
                     " (betas in [0,1), eps >= 0, step >= 1 with bias correction)");
  if (n == 0) return;
  PRECON_DISPATCH(device, adamw_update, params, grads, m, v, hp);
}

double global_norm(const std::vector<Tensor>& tensors) {
  double total = 0.0;
  for (const Tensor& t : tensors) total += sum_squares(t);
  return std::sqrt(total);
}

}  // namespace precon::kernels
