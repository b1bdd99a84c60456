#include "worker/model/mla.h"

#include <cmath>
#include <initializer_list>

#include "kernels/backend.h"
#include "kernels/linalg.h"
#include "kernels/nn.h"

namespace precon::worker {

namespace k = kernels;
using k::Tensor;

namespace {

// A view of t's memory `offset` elements in, with the given shape and element strides.
Tensor mla_view(const Tensor& t, int64_t offset, std::initializer_list<int64_t> shape,
                std::initializer_list<int64_t> strides) {
  Tensor v = t;
  v.shape = {};
  v.strides = {};
  v.data = static_cast<char*>(t.data) + offset * static_cast<int64_t>(k::dtype_size(t.dtype));
  v.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) v.shape[static_cast<size_t>(d++)] = s;
  d = 0;
  for (int64_t s : strides) v.strides[static_cast<size_t>(d++)] = s;
  return v;
}

int64_t mla_rows(const Tensor& t) { return t.shape[0] * t.shape[1]; }

// Channels [off, off + w) of each of the nh heads of a contiguous (B, T, W): (B·T, nh, w).
Tensor mla_heads(const Tensor& t, int64_t nh, int64_t off, int64_t w) {
  const int64_t W = t.shape[2];
  return mla_view(t, off, {mla_rows(t), nh, w}, {W, W / nh, 1});
}

}  // namespace

MlaAttention::MlaAttention(TpGroup tp, const MlaRows& rows, const MlaDims& dims, const k::Rope& rope,
                           double softmax_factor, float eps)
    : tp_(tp), rows_(rows), d_(dims), rope_(rope), softmax_factor_(softmax_factor), eps_(eps),
      q_(tp, {rows.q}, {}, k::WeightLayout::out_in),
      kv_a_(TpGroup{}, {rows.kv_a}, {}, k::WeightLayout::out_in),
      kv_b_(tp, {rows.kv_b}, {}, k::WeightLayout::out_in),
      o_(tp, rows.o, kNoRow, k::WeightLayout::out_in) {
  if (rows.q_a != kNoRow) q_a_.emplace(TpGroup{}, std::vector<size_t>{rows.q_a}, std::vector<size_t>{}, k::WeightLayout::out_in);
}

float MlaAttention::q_scale() const {
  return static_cast<float>(softmax_factor_ * std::sqrt(static_cast<double>(d_.packed()) / static_cast<double>(d_.qk())));
}

void MlaAttention::forward(const LayerWeights& w, Tensor out, const Tensor& x, const MlaLayerActs& a,
                           const MlaScratch& s, Tensor row_max) const {
  const int64_t NH = d_.heads, N = mla_rows(x), H = d_.packed(), R = d_.kv_rank;
  const int64_t dn = d_.nope, dr = d_.rope, dv = d_.v, W = 3 * NH * H;
  // The packed layout's section i (q, k, v), channels [off, off + width) of each head.
  auto packed = [&](const Tensor& t, int i, int64_t off, int64_t width) {
    return mla_view(t, i * NH * H + off, {N, NH, width}, {W, H, 1});
  };
  if (q_a_) {
    q_a_->forward(w, x, {a.cq});
    k::rmsnorm_forward(a.cqn, a.rstdq, a.cq, w.weight(rows_.q_norm), eps_);
    q_.forward(w, a.cqn, {s.q});
  } else {
    q_.forward(w, x, {s.q});
  }
  kv_a_.forward(w, x, {s.kva});
  k::copy_strided(mla_view(a.ckv, 0, {N, R}, {R, 1}), mla_view(s.kva, 0, {N, R}, {R + dr, 1}));
  k::copy_strided(mla_view(s.kpe, 0, {N, dr}, {dr, 1}), mla_view(s.kva, R, {N, dr}, {R + dr, 1}));
  k::rmsnorm_forward(a.ckvn, a.rstdkv, a.ckv, w.weight(rows_.kv_norm), eps_);
  kv_b_.forward(w, a.ckvn, {s.kv});
  k::copy_strided(mla_heads(s.qpe, NH, 0, dr), mla_heads(s.q, NH, dn, dr));
  k::rope_forward(s.qpe, static_cast<int>(NH), rope_);
  k::rope_forward(s.kpe, 1, rope_);
  if (H != d_.qk() || H != dv) k::fill_zero(a.qkv);  // the padding
  const float sc = q_scale();
  k::copy_strided(packed(a.qkv, 0, 0, dn), mla_heads(s.q, NH, 0, dn), sc);
  k::copy_strided(packed(a.qkv, 0, dn, dr), mla_heads(s.qpe, NH, 0, dr), sc);
  k::copy_strided(packed(a.qkv, 1, 0, dn), mla_heads(s.kv, NH, 0, dn));
  k::copy_strided(packed(a.qkv, 1, dn, dr), mla_view(s.kpe, 0, {N, NH, dr}, {dr, 0, 1}));  // every head's
  k::copy_strided(packed(a.qkv, 2, 0, dv), mla_heads(s.kv, NH, dn, dv));
  k::attention_forward(a.atty, a.att, a.qkv, static_cast<int>(NH), row_max);
  k::copy_strided(mla_heads(a.attv, NH, 0, dv), mla_heads(a.atty, NH, 0, dv));
  o_.forward(w, out, a.attv);
}

void MlaAttention::backward(const LayerWeights& w, Tensor dx, const Tensor& x, const Tensor& dout,
                            const MlaLayerActs& a, const MlaScratch& s) const {
  const int64_t NH = d_.heads, N = mla_rows(x), H = d_.packed(), R = d_.kv_rank;
  const int64_t dn = d_.nope, dr = d_.rope, dv = d_.v, W = 3 * NH * H;
  auto packed = [&](const Tensor& t, int i, int64_t off, int64_t width) {
    return mla_view(t, i * NH * H + off, {N, NH, width}, {W, H, 1});
  };
  k::fill_zero(s.dattv);
  o_.backward(w, s.dattv, a.attv, dout);
  k::fill_zero(s.datty);
  k::copy_strided(mla_heads(s.datty, NH, 0, dv), mla_heads(s.dattv, NH, 0, dv));
  k::fill_zero(s.dqkv);
  k::attention_backward(s.dqkv, s.datt, s.datty, a.qkv, a.att, static_cast<int>(NH));
  // The queries: the nope part as it is, the rope part through the inverse rotation.
  const float sc = q_scale();
  k::copy_strided(mla_heads(s.dq, NH, 0, dn), packed(s.dqkv, 0, 0, dn), sc);
  k::copy_strided(mla_heads(s.dqpe, NH, 0, dr), packed(s.dqkv, 0, dn, dr), sc);
  k::rope_backward(s.dqpe, static_cast<int>(NH), rope_);
  k::copy_strided(mla_heads(s.dq, NH, dn, dr), mla_heads(s.dqpe, NH, 0, dr));
  // q_b (q_proj) reduces its input's gradient over the ranks: before kv_a adds to dx.
  if (q_a_) {
    k::fill_zero(s.dcqn);
    q_.backward(w, s.dcqn, a.cqn, {s.dq});
    k::fill_zero(s.dcq);
    k::rmsnorm_backward(s.dcq, w.grad(rows_.q_norm), s.dcqn, a.cq, w.weight(rows_.q_norm), a.rstdq);
    q_a_->backward(w, dx, x, {s.dcq});
  } else {
    q_.backward(w, dx, x, {s.dq});
  }
  // The keys' and values' per-head parts, then the latent through kv_b and its norm.
  k::copy_strided(mla_heads(s.dkv, NH, 0, dn), packed(s.dqkv, 1, 0, dn));
  k::copy_strided(mla_heads(s.dkv, NH, dn, dv), packed(s.dqkv, 2, 0, dv));
  k::fill_zero(s.dckvn);
  kv_b_.backward(w, s.dckvn, a.ckvn, {s.dkv});
  k::fill_zero(s.dckv);
  k::rmsnorm_backward(s.dckv, w.grad(rows_.kv_norm), s.dckvn, a.ckv, w.weight(rows_.kv_norm), a.rstdkv);
  // The shared RoPE key: the sum over every head (of every rank).
  for (int64_t h = 0; h < NH; ++h)
    k::copy_strided(mla_view(s.dkpe, 0, {N, 1, dr}, {dr, dr, 1}),
                    mla_view(s.dqkv, NH * H + h * H + dn, {N, 1, dr}, {W, H, 1}), 1.0f, h > 0);
  k::rope_backward(s.dkpe, 1, rope_);
  replicated_input_backward(tp_, s.dkpe);
  k::copy_strided(mla_view(s.dkva, 0, {N, R}, {R + dr, 1}), mla_view(s.dckv, 0, {N, R}, {R, 1}));
  k::copy_strided(mla_view(s.dkva, R, {N, dr}, {R + dr, 1}), mla_view(s.dkpe, 0, {N, dr}, {dr, 1}));
  kv_a_.backward(w, dx, x, {s.dkva});
}

}  // namespace precon::worker
