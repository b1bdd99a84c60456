// The mixture-of-experts layer (worker/parallel/moe.h) alone, forward + backward, on one process:
// N tokens of C channels, E experts of SwiGLU width F, top K, an optional shared expert, N(0, 0.02)
// weights and inputs. Prints one JSON line: the median seconds of --iters timed passes (after two
// warm-up passes) and the tokens per second. tests/bench/moe_vs_torch.py runs it beside PyTorch.
// Usage: precon_moe_layer_bench [--tokens N] [--channels C] [--experts E] [--top-k K] [--ffn F]
//                               [--shared S] [--iters I] [--threads T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/parallel/moe.h"

namespace pw = precon::worker;
namespace k = precon::kernels;

namespace {

// The layer's weights and gradients, one tensor a row: the router, then gate, up and down of each
// expert, then the shared expert's.
class BenchWeights final : public pw::LayerWeights {
 public:
  void add(int64_t rows, int64_t cols, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 0.02f);
    data_.emplace_back(static_cast<size_t>(rows * cols));
    for (float& x : data_.back()) x = dist(rng);
    grads_.emplace_back(static_cast<size_t>(rows * cols), 0.0f);
    shapes_.push_back({rows, cols});
  }
  size_t size() const { return data_.size(); }
  k::Tensor weight(size_t row) const override { return view(data_[row], row); }
  k::Tensor grad(size_t row) const override { return view(grads_[row], row); }

 private:
  k::Tensor view(const std::vector<float>& v, size_t row) const {
    return k::Tensor::view(const_cast<float*>(v.data()), {shapes_[row].first, shapes_[row].second});
  }
  std::vector<std::vector<float>> data_, grads_;
  std::vector<std::pair<int64_t, int64_t>> shapes_;
};

int64_t arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t N = arg(argc, argv, "--tokens", 2048), C = arg(argc, argv, "--channels", 256),
                E = arg(argc, argv, "--experts", 8), K = arg(argc, argv, "--top-k", 2), F = arg(argc, argv, "--ffn", 256),
                S = arg(argc, argv, "--shared", 0), iters = arg(argc, argv, "--iters", 5);
  k::set_cpu_threads(static_cast<int>(arg(argc, argv, "--threads", 1)));
  std::mt19937 rng(5);
  BenchWeights w;
  pw::MoeMlp::Rows rows;
  w.add(E, C, rng);
  rows.router = 0;
  for (int64_t e = 0; e < E; ++e) {
    rows.gate.push_back(w.size());
    w.add(F, C, rng);
    rows.up.push_back(w.size());
    w.add(F, C, rng);
    rows.down.push_back(w.size());
    w.add(C, F, rng);
  }
  if (S > 0) {
    rows.shared_gate = w.size();
    w.add(S * F, C, rng);
    rows.shared_up = w.size();
    w.add(S * F, C, rng);
    rows.shared_down = w.size();
    w.add(C, S * F, rng);
  }
  pw::MoeMlp::Routing routing;
  routing.top_k = K;
  routing.aux_loss_coeff = 1e-2;
  const pw::MoeMlp moe(pw::TpGroup{}, pw::TpGroup{}, rows, routing);
  pw::MoeMlp::Shape shape;
  shape.tokens = N;
  shape.channels = C;
  shape.expert_width = F;
  shape.shared_width = S * F;
  pw::MoeMlp::Acts acts = moe.make_acts(shape);
  pw::MoeMlp::Scratch scratch = moe.make_scratch(shape);

  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(N * C)), out(x.size()), dout(x.size()), dx(x.size());
  for (float& v : x) v = dist(rng);
  for (float& v : dout) v = dist(rng) * 1e-3f;
  const k::Tensor tx = k::Tensor::view(x.data(), {N, C}), tout = k::Tensor::view(out.data(), {N, C}),
                  tdout = k::Tensor::view(dout.data(), {N, C}), tdx = k::Tensor::view(dx.data(), {N, C});
  std::vector<double> seconds;
  for (int64_t i = 0; i < iters + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    moe.forward(w, tout, tx, acts);
    k::fill_zero(tdx);
    moe.backward(w, tdx, tx, tdout, acts, scratch);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("{\"seconds\": %.6f, \"tokens_per_second\": %.1f}\n", median, static_cast<double>(N) / median);
  return 0;
}
