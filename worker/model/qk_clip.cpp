#include "worker/model/qk_clip.h"

#include <algorithm>
#include <string>

#include "kernels/linalg.h"

namespace precon::worker {

namespace k = kernels;

namespace {

// Multiplies [first, first + count) along `dim` of a 2-D row-major tensor (or a 1-D one) by s.
void scale_range(const k::Tensor& t, int dim, int64_t first, int64_t count, float s) {
  if (t.ndim == 1 || dim == 0) {
    k::scale(t.narrow(0, first, count), s);
    return;
  }
  // Columns of a stored (in, out) matrix: through the host (a clip is rare and the matrix small
  // next to a step's work).
  std::vector<float> host(static_cast<size_t>(t.numel()));
  const k::Tensor h = k::Tensor::view(host.data(), {t.shape[0], t.shape[1]});
  k::copy(h, t);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    for (int64_t c = first; c < first + count; ++c) host[static_cast<size_t>(r * t.shape[1] + c)] *= s;
  k::copy(t, h);
}

}  // namespace

QkClipStats qk_clip(const ParamStore& params, const ModelConfig& m, const std::vector<float>& logit_max,
                    double threshold, double alpha) {
  QkClipStats stats;
  const int64_t NH = m.n_head, NKV = m.llama() ? m.kv_heads() : NH, hd = m.d_model / NH, C = m.d_model;
  const int64_t group = NH / NKV;
  // Under tensor parallelism this rank holds the query and key rows of kv heads [g0, g0 + per) only
  // (each of c_attn's q, k and v blocks cut alike: Cl columns of each here).
  const TpPlace tp = params.tp();
  const int64_t per = NKV / tp.size, g0 = tp.rank * per, Cl = C / tp.size;
  stats.layer_max_logit.assign(static_cast<size_t>(m.blocks()), -INFINITY);
  for (int64_t l = 0; l < m.blocks(); ++l) {
    for (int64_t g = 0; g < NKV; ++g) {
      float S = -INFINITY;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) S = std::max(S, logit_max[static_cast<size_t>(l * NH + h)]);
      stats.max_logit = std::max(stats.max_logit, static_cast<double>(S));
      double& layer_max = stats.layer_max_logit[static_cast<size_t>(l)];
      layer_max = std::max(layer_max, static_cast<double>(S));
      if (!(S > threshold)) continue;
      ++stats.clipped;
      const double gamma = threshold / static_cast<double>(S);
      const float sq = static_cast<float>(std::pow(gamma, alpha)), sk = static_cast<float>(std::pow(gamma, 1.0 - alpha));
      if (g < g0 || g >= g0 + per) continue;  // another tensor-parallel rank's head
      const int64_t gl = g - g0;
      if (m.uses_mla()) {
        const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
        const size_t q = params.index(p + (m.mla.q_lora_rank > 0 ? "q_b_proj.weight" : "q_proj.weight"));
        const size_t kv = params.index(p + "kv_b_proj.weight");
        if (!params.resident(q)) continue;
        const int64_t dn = m.mla.qk_nope_head_dim, qk = dn + m.mla.qk_rope_head_dim, kvw = dn + m.mla.v_head_dim;
        scale_range(params.param(q), 0, gl * qk, dn, sq);
        scale_range(params.param(q), 0, gl * qk + dn, qk - dn, static_cast<float>(gamma));
        scale_range(params.param(kv), 0, gl * kvw, dn, sk);
      } else if (m.llama()) {
        const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
        const size_t q = params.index(p + "q_proj.weight"), kk = params.index(p + "k_proj.weight");
        if (!params.resident(q)) continue;  // another pipeline stage's layer
        scale_range(params.param(q), 0, gl * group * hd, group * hd, sq);
        scale_range(params.param(kk), 0, gl * hd, hd, sk);
      } else {
        const std::string p = "h." + std::to_string(l) + ".attn.c_attn.";
        const size_t w = params.index(p + "weight"), b = params.index(p + "bias");
        if (!params.resident(w)) continue;
        scale_range(params.param(w), 1, gl * hd, hd, sq);
        scale_range(params.param(w), 1, Cl + gl * hd, hd, sk);
        scale_range(params.param(b), 0, gl * hd, hd, sq);
        scale_range(params.param(b), 0, Cl + gl * hd, hd, sk);
      }
    }
  }
  return stats;
}

}  // namespace precon::worker
