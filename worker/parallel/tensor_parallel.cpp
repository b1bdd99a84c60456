#include "worker/parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace precon::worker {

using kernels::Tensor;

void copy_to_tp_region_forward(Tensor, Communicator&) {}
void copy_to_tp_region_backward(Tensor dx, Communicator& tp) { tp.all_reduce_sum(dx.f32(), dx.numel()); }
void reduce_from_tp_region_forward(Tensor x, Communicator& tp) { tp.all_reduce_sum(x.f32(), x.numel()); }
void reduce_from_tp_region_backward(Tensor, Communicator&) {}

namespace {
int64_t last_dim(const Tensor& t) { return t.shape[t.ndim - 1]; }
}  // namespace

void gather_from_tp_region_forward(Tensor full, const Tensor& local, Communicator& tp) {
  const int64_t n = last_dim(local), rows = local.numel() / n, size = tp.size();
  std::vector<float> gathered(static_cast<size_t>(local.numel() * size));
  tp.all_gather(local.f32(), gathered.data(), local.numel());
  float* out = full.f32();
  for (int64_t r = 0; r < size; ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(gathered.data() + (r * rows + i) * n, n, out + i * n * size + r * n);
}

void gather_from_tp_region_backward(Tensor dlocal, const Tensor& dfull, Communicator& tp) {
  scatter_to_tp_region_forward(dlocal, dfull, tp);
}

void scatter_to_tp_region_forward(Tensor local, const Tensor& full, Communicator& tp) {
  const int64_t n = last_dim(local), rows = local.numel() / n, size = tp.size(), r = tp.rank();
  for (int64_t i = 0; i < rows; ++i) std::copy_n(full.f32() + i * n * size + r * n, n, local.f32() + i * n);
}

void scatter_to_tp_region_backward(Tensor dfull, const Tensor& dlocal, Communicator& tp) {
  gather_from_tp_region_forward(dfull, dlocal, tp);
}

void vocab_parallel_embedding_forward(Tensor out, const int32_t* tokens, int64_t B, int64_t T, const Tensor& wte_part,
                                      int64_t first, const Tensor& wpe, Communicator& tp) {
  const int64_t C = wte_part.shape[1], rows = wte_part.shape[0];
  float* o = out.f32();
  std::fill_n(o, B * T * C, 0.0f);
  for (int64_t i = 0; i < B * T; ++i) {
    const int64_t row = tokens[i] - first;
    if (row >= 0 && row < rows) std::copy_n(wte_part.f32() + row * C, C, o + i * C);
  }
  tp.all_reduce_sum(o, B * T * C);
  if (!wpe.data) return;  // no learned positions (llama)
  for (int64_t i = 0; i < B * T; ++i) {
    const float* p = wpe.f32() + (i % T) * C;
    for (int64_t c = 0; c < C; ++c) o[i * C + c] += p[c];
  }
}

void vocab_parallel_embedding_backward(Tensor dwte_part, Tensor dwpe, const Tensor& dout, const int32_t* tokens,
                                       int64_t B, int64_t T, int64_t first) {
  const int64_t C = dout.shape[dout.ndim - 1], rows = dwte_part.shape[0];
  const float* d = dout.f32();
  for (int64_t i = 0; i < B * T; ++i) {
    if (dwpe.data) {
      float* p = dwpe.f32() + (i % T) * C;
      for (int64_t c = 0; c < C; ++c) p[c] += d[i * C + c];
    }
    const int64_t row = tokens[i] - first;
    if (row < 0 || row >= rows) continue;
    float* w = dwte_part.f32() + row * C;
    for (int64_t c = 0; c < C; ++c) w[c] += d[i * C + c];
  }
}

void vocab_parallel_cross_entropy(Tensor losses, Tensor logits, const int32_t* targets, int64_t first,
                                  int64_t vocab_size, float scale, bool backward, Communicator& tp) {
  const int64_t Vl = last_dim(logits), N = logits.numel() / Vl;
  const int64_t valid = std::clamp<int64_t>(vocab_size - first, 0, Vl);  // columns below vocab_size here
  float* l = logits.f32();
  std::vector<float> max(static_cast<size_t>(N), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = 0; v < valid; ++v) max[i] = std::max(max[i], l[i * Vl + v]);
  tp.all_reduce_max(max.data(), N);
  // [sum of exp(logit − max) | the target's logit], each rank adding what it holds.
  std::vector<double> sums(static_cast<size_t>(2 * N), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t v = 0; v < valid; ++v) s += std::exp(static_cast<double>(l[i * Vl + v]) - max[i]);
    sums[i] = s;
    const int64_t t = targets[i] - first;
    if (targets[i] >= 0 && t >= 0 && t < valid) sums[N + i] = l[i * Vl + t];
  }
  tp.all_reduce_sum(sums.data(), 2 * N);
  float* out = losses.f32();
  for (int64_t i = 0; i < N; ++i) {
    out[i] = targets[i] < 0 ? 0.0f : static_cast<float>(std::log(sums[i]) + max[i] - sums[N + i]);
    if (!backward) continue;
    float* row = l + i * Vl;
    if (targets[i] < 0) {
      std::fill_n(row, Vl, 0.0f);
      continue;
    }
    for (int64_t v = 0; v < Vl; ++v) {
      if (v >= valid) {
        row[v] = 0.0f;
        continue;
      }
      const double p = std::exp(static_cast<double>(row[v]) - max[i]) / sums[i];
      row[v] = static_cast<float>((p - (v == targets[i] - first ? 1.0 : 0.0)) * scale);
    }
  }
}

}  // namespace precon::worker
