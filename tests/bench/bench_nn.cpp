// Forward and backward of each NN op on the CPU at GPT-2 small shapes (C = 768, NH = 12,
// Vp = 50304) with a short batch (B = 4, T = 64 unless an argument says otherwise); the Llama ops
// at B·T = 4096 rows; the mixture-of-experts ops at 4096 tokens, 64 experts, top 8, C = 512.
// items/s counts FLOPs for the GEMM-based ops and rows otherwise; bytes/s counts the memory
// each call must touch at least once.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/nn.h"

namespace {

using precon::kernels::DType;
using precon::kernels::Tensor;
using precon::kernels::WeightLayout;
namespace k = precon::kernels;

constexpr int64_t kB = 4, kT = 64, kC = 768, kNH = 12, kV = 50257, kVp = 50304;

std::vector<float> normal(size_t n, float stddev = 1.0f, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> tokens(size_t n, int32_t vocab) {
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

Tensor view(std::vector<float>& v, std::initializer_list<int64_t> shape) { return Tensor::view(v.data(), shape); }
Tensor view(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor::view(v.data(), shape, DType::i32);
}

void BM_EncoderForward(benchmark::State& state) {
  auto tok = tokens(kB * kT, kV);
  auto wte = normal(kVp * kC, 0.02f), wpe = normal(1024 * kC, 0.02f);
  std::vector<float> out(kB * kT * kC);
  for (auto _ : state) {
    k::encoder_forward(view(out, {kB, kT, kC}), view(tok, {kB, kT}), view(wte, {kVp, kC}), view(wpe, {1024, kC}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kB * kT);
  state.SetBytesProcessed(state.iterations() * kB * kT * kC * 3 * int64_t(sizeof(float)));
}

void BM_EncoderBackward(benchmark::State& state) {
  auto tok = tokens(kB * kT, kV);
  auto dout = normal(kB * kT * kC);
  std::vector<float> dwte(kVp * kC), dwpe(1024 * kC);
  for (auto _ : state) {
    k::encoder_backward(view(dwte, {kVp, kC}), view(dwpe, {1024, kC}), view(dout, {kB, kT, kC}), view(tok, {kB, kT}));
    benchmark::DoNotOptimize(dwte.data());
  }
  state.SetItemsProcessed(state.iterations() * kB * kT);
  state.SetBytesProcessed(state.iterations() * kB * kT * kC * 5 * int64_t(sizeof(float)));
}

void BM_LayernormForward(benchmark::State& state) {
  const int64_t N = kB * kT;
  auto inp = normal(N * kC), w = normal(kC), b = normal(kC);
  std::vector<float> out(N * kC), mean(N), rstd(N);
  for (auto _ : state) {
    k::layernorm_forward(view(out, {N, kC}), view(mean, {N}), view(rstd, {N}), view(inp, {N, kC}), view(w, {kC}),
                         view(b, {kC}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * kC * 2 * int64_t(sizeof(float)));
}

void BM_LayernormBackward(benchmark::State& state) {
  const int64_t N = kB * kT;
  auto inp = normal(N * kC), w = normal(kC), b = normal(kC), dout = normal(N * kC);
  std::vector<float> out(N * kC), mean(N), rstd(N), dinp(N * kC), dw(kC), db(kC);
  k::layernorm_forward(view(out, {N, kC}), view(mean, {N}), view(rstd, {N}), view(inp, {N, kC}), view(w, {kC}),
                       view(b, {kC}));
  for (auto _ : state) {
    k::layernorm_backward(view(dinp, {N, kC}), view(dw, {kC}), view(db, {kC}), view(dout, {N, kC}),
                          view(inp, {N, kC}), view(w, {kC}), view(mean, {N}), view(rstd, {N}));
    benchmark::DoNotOptimize(dinp.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * kC * 4 * int64_t(sizeof(float)));
}

void BM_GeluForward(benchmark::State& state) {
  const int64_t n = kB * kT * 4 * kC;
  auto inp = normal(n);
  std::vector<float> out(n);
  for (auto _ : state) {
    k::gelu_forward(view(out, {n}), view(inp, {n}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 2 * int64_t(sizeof(float)));
}

void BM_GeluBackward(benchmark::State& state) {
  const int64_t n = kB * kT * 4 * kC;
  auto inp = normal(n), dout = normal(n);
  std::vector<float> dinp(n);
  for (auto _ : state) {
    k::gelu_backward(view(dinp, {n}), view(inp, {n}), view(dout, {n}));
    benchmark::DoNotOptimize(dinp.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 4 * int64_t(sizeof(float)));
}

// The MLP's first projection, C -> 4C, in Hugging Face's Conv1D layout.
void BM_MatmulForward(benchmark::State& state) {
  const int64_t N = kB * kT, OC = 4 * kC;
  auto inp = normal(N * kC), w = normal(kC * OC, 0.02f), b = normal(OC);
  std::vector<float> out(N * OC);
  for (auto _ : state) {
    k::matmul_forward(view(out, {N, OC}), view(inp, {N, kC}), view(w, {kC, OC}), view(b, {OC}),
                      WeightLayout::in_out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * N * kC * OC);
}

void BM_MatmulBackward(benchmark::State& state) {
  const int64_t N = kB * kT, OC = 4 * kC;
  auto inp = normal(N * kC), w = normal(kC * OC, 0.02f), dout = normal(N * OC);
  std::vector<float> dinp(N * kC), dw(kC * OC), db(OC);
  for (auto _ : state) {
    k::matmul_backward(view(dinp, {N, kC}), view(dw, {kC, OC}), view(db, {OC}), view(dout, {N, OC}),
                       view(inp, {N, kC}), view(w, {kC, OC}), WeightLayout::in_out);
    benchmark::DoNotOptimize(dw.data());
  }
  state.SetItemsProcessed(state.iterations() * 4 * N * kC * OC);
}

// FLOPs of the two (T x T x hs) products per head, counting the full square that sgemm computes.
int64_t attention_flops(int64_t T) { return kB * kNH * 2 * 2 * T * T * (kC / kNH); }

void BM_AttentionForward(benchmark::State& state) {
  const int64_t T = state.range(0);
  auto qkv = normal(kB * T * 3 * kC);
  std::vector<float> out(kB * T * kC), att(kB * kNH * T * T);
  for (auto _ : state) {
    k::attention_forward(view(out, {kB, T, kC}), view(att, {kB, kNH, T, T}), view(qkv, {kB, T, 3 * kC}), kNH);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * attention_flops(T));
}

// With each row's largest logit written out (QK-clip's statistic): against BM_AttentionForward.
void BM_AttentionForwardRowMax(benchmark::State& state) {
  const int64_t T = state.range(0);
  auto qkv = normal(kB * T * 3 * kC);
  std::vector<float> out(kB * T * kC), att(kB * kNH * T * T), row_max(kB * kNH * T);
  for (auto _ : state) {
    k::attention_forward(view(out, {kB, T, kC}), view(att, {kB, kNH, T, T}), view(qkv, {kB, T, 3 * kC}), kNH,
                         view(row_max, {kB, kNH, T}));
    benchmark::DoNotOptimize(row_max.data());
  }
  state.SetItemsProcessed(state.iterations() * attention_flops(T));
}

void BM_AttentionBackward(benchmark::State& state) {
  const int64_t T = state.range(0);
  auto qkv = normal(kB * T * 3 * kC), dout = normal(kB * T * kC);
  std::vector<float> out(kB * T * kC), att(kB * kNH * T * T), datt(att.size()), dqkv(qkv.size());
  k::attention_forward(view(out, {kB, T, kC}), view(att, {kB, kNH, T, T}), view(qkv, {kB, T, 3 * kC}), kNH);
  for (auto _ : state) {
    k::attention_backward(view(dqkv, {kB, T, 3 * kC}), view(datt, {kB, kNH, T, T}), view(dout, {kB, T, kC}),
                          view(qkv, {kB, T, 3 * kC}), view(att, {kB, kNH, T, T}), kNH);
    benchmark::DoNotOptimize(dqkv.data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * attention_flops(T));
}

void BM_CrossentropyForward(benchmark::State& state) {
  const int64_t N = kB * kT;
  auto logits = normal(N * kVp);
  auto tgt = tokens(N, kV);
  std::vector<float> losses(N);
  for (auto _ : state) {
    k::crossentropy_forward(view(losses, {N}), view(logits, {N, kVp}), view(tgt, {N}), kV);
    benchmark::DoNotOptimize(losses.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * kVp * int64_t(sizeof(float)));
}

void BM_CrossentropyBackward(benchmark::State& state) {
  const int64_t N = kB * kT;
  auto logits = normal(N * kVp);
  auto tgt = tokens(N, kV);
  std::vector<float> losses(N), dlogits(N * kVp);
  for (auto _ : state) {
    k::crossentropy_backward(view(dlogits, {N, kVp}), view(losses, {N}), view(logits, {N, kVp}), view(tgt, {N}), kV,
                             1.0f / N);
    benchmark::DoNotOptimize(dlogits.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * kVp * 2 * int64_t(sizeof(float)));
}

void BM_AdamW(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto p = normal(n), g = normal(n);
  std::vector<float> m(n), v(n);
  k::AdamWParams hp;
  hp.weight_decay = 0.1f;
  for (auto _ : state) {
    k::adamw_update(view(p, {n}), view(g, {n}), view(m, {n}), view(v, {n}), hp);
    benchmark::DoNotOptimize(p.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 7 * int64_t(sizeof(float)));  // read p g m v, write p m v
}

// The Llama ops at a Llama-style block: B·T = 4096 rows, C = 768, F = 2048, 12 heads of 64 (RoPE:
// B = 4, T = 1024). items/s counts rows (elements for SwiGLU).
constexpr int64_t kLlamaRows = 4096, kLlamaF = 2048, kRopeB = 4, kRopeT = 1024, kHeadDim = 64;

void BM_EmbeddingForward(benchmark::State& state) {
  auto tok = tokens(kLlamaRows, kV);
  auto wte = normal(kVp * kC, 0.02f);
  std::vector<float> out(kLlamaRows * kC);
  for (auto _ : state) {
    k::embedding_forward(view(out, {1, kLlamaRows, kC}), view(tok, {1, kLlamaRows}), view(wte, {kVp, kC}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kLlamaRows);
  state.SetBytesProcessed(state.iterations() * kLlamaRows * kC * 2 * int64_t(sizeof(float)));
}

void BM_EmbeddingBackward(benchmark::State& state) {
  auto tok = tokens(kLlamaRows, kV);
  auto dout = normal(kLlamaRows * kC);
  std::vector<float> dwte(kVp * kC);
  for (auto _ : state) {
    k::embedding_backward(view(dwte, {kVp, kC}), view(dout, {1, kLlamaRows, kC}), view(tok, {1, kLlamaRows}));
    benchmark::DoNotOptimize(dwte.data());
  }
  state.SetItemsProcessed(state.iterations() * kLlamaRows);
  state.SetBytesProcessed(state.iterations() * kLlamaRows * kC * 3 * int64_t(sizeof(float)));
}

void BM_RmsnormForward(benchmark::State& state) {
  const int64_t N = kLlamaRows;
  auto inp = normal(N * kC), w = normal(kC);
  std::vector<float> out(N * kC), rstd(N);
  for (auto _ : state) {
    k::rmsnorm_forward(view(out, {N, kC}), view(rstd, {N}), view(inp, {N, kC}), view(w, {kC}), 1e-5f);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * kC * 2 * int64_t(sizeof(float)));
}

void BM_RmsnormBackward(benchmark::State& state) {
  const int64_t N = kLlamaRows;
  auto inp = normal(N * kC), w = normal(kC), dout = normal(N * kC);
  std::vector<float> out(N * kC), rstd(N), dinp(N * kC), dw(kC);
  k::rmsnorm_forward(view(out, {N, kC}), view(rstd, {N}), view(inp, {N, kC}), view(w, {kC}), 1e-5f);
  for (auto _ : state) {
    k::rmsnorm_backward(view(dinp, {N, kC}), view(dw, {kC}), view(dout, {N, kC}), view(inp, {N, kC}), view(w, {kC}),
                        view(rstd, {N}));
    benchmark::DoNotOptimize(dinp.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * kC * 4 * int64_t(sizeof(float)));
}

// In place; the angle table (T·hd/2 cos/sin pairs computed in double) is part of every call.
void BM_Rope(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const int64_t n = kRopeB * kRopeT * kC;
  auto x = normal(n);
  for (auto _ : state) {
    (backward ? k::rope_backward : k::rope_forward)(view(x, {kRopeB, kRopeT, kC}), kC / kHeadDim, 10000.0);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetLabel(backward ? "backward" : "forward");
  state.SetItemsProcessed(state.iterations() * kRopeB * kRopeT);
  state.SetBytesProcessed(state.iterations() * n * 2 * int64_t(sizeof(float)));
}

void BM_SwigluForward(benchmark::State& state) {
  const int64_t n = kLlamaRows * kLlamaF;
  auto gate = normal(n), up = normal(n);
  std::vector<float> out(n);
  for (auto _ : state) {
    k::swiglu_forward(view(out, {kLlamaRows, kLlamaF}), view(gate, {kLlamaRows, kLlamaF}),
                      view(up, {kLlamaRows, kLlamaF}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 3 * int64_t(sizeof(float)));
}

void BM_SwigluBackward(benchmark::State& state) {
  const int64_t n = kLlamaRows * kLlamaF;
  auto gate = normal(n), up = normal(n), dout = normal(n);
  std::vector<float> dgate(n), dup(n);
  for (auto _ : state) {
    k::swiglu_backward(view(dgate, {kLlamaRows, kLlamaF}), view(dup, {kLlamaRows, kLlamaF}),
                       view(dout, {kLlamaRows, kLlamaF}), view(gate, {kLlamaRows, kLlamaF}),
                       view(up, {kLlamaRows, kLlamaF}));
    benchmark::DoNotOptimize(dgate.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 7 * int64_t(sizeof(float)));  // read 5, write 2 (+= reads them)
}

// Grouped-query packing, 12 query heads over 4 kv heads of 64.
void BM_QkvPackForward(benchmark::State& state) {
  const int64_t N = kLlamaRows, Ckv = kC / 3;
  auto q = normal(N * kC), kk = normal(N * Ckv), v = normal(N * Ckv);
  std::vector<float> qkv(N * 3 * kC);
  for (auto _ : state) {
    k::qkv_pack_forward(view(qkv, {1, N, 3 * kC}), view(q, {1, N, kC}), view(kk, {1, N, Ckv}), view(v, {1, N, Ckv}),
                        kNH, kNH / 3);
    benchmark::DoNotOptimize(qkv.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * (kC + 2 * Ckv + 3 * kC) * int64_t(sizeof(float)));
}

void BM_QkvPackBackward(benchmark::State& state) {
  const int64_t N = kLlamaRows, Ckv = kC / 3;
  auto dqkv = normal(N * 3 * kC);
  std::vector<float> dq(N * kC), dk(N * Ckv), dv(N * Ckv);
  for (auto _ : state) {
    k::qkv_pack_backward(view(dq, {1, N, kC}), view(dk, {1, N, Ckv}), view(dv, {1, N, Ckv}), view(dqkv, {1, N, 3 * kC}),
                         kNH, kNH / 3);
    benchmark::DoNotOptimize(dq.data());
  }
  state.SetItemsProcessed(state.iterations() * N);
  state.SetBytesProcessed(state.iterations() * N * (3 * kC + 2 * (kC + 2 * Ckv)) * int64_t(sizeof(float)));
}

// Mixture of experts at N = 4096 tokens, E = 64 experts, K = 8 per token (M = N·K = 32768
// assignments) and C = 512 channels.
constexpr int64_t kMoeN = 4096, kMoeE = 64, kMoeK = 8, kMoeC = 512, kMoeM = kMoeN * kMoeK;

// A routing and the assignments grouped by expert as the MoE layer groups them: rows[p] is the
// token of slot p, pos[n, j] the slot of token n's j-th expert.
struct MoeBenchRouting {
  std::vector<float> logits, probs, w;
  std::vector<int32_t> idx, rows, pos;
};

MoeBenchRouting moe_bench_routing() {
  MoeBenchRouting r{normal(kMoeN * kMoeE), std::vector<float>(kMoeN * kMoeE), std::vector<float>(kMoeM),
                    std::vector<int32_t>(kMoeM), std::vector<int32_t>(kMoeM), std::vector<int32_t>(kMoeM)};
  k::moe_router_forward(view(r.probs, {kMoeN, kMoeE}), view(r.idx, {kMoeN, kMoeK}), view(r.w, {kMoeN, kMoeK}),
                        view(r.logits, {kMoeN, kMoeE}));
  std::vector<int64_t> next(kMoeE + 1, 0);
  for (int32_t e : r.idx) ++next[e + 1];
  for (int64_t e = 0; e < kMoeE; ++e) next[e + 1] += next[e];
  for (int64_t i = 0; i < kMoeM; ++i) {
    const int64_t p = next[r.idx[i]]++;
    r.rows[p] = static_cast<int32_t>(i / kMoeK);
    r.pos[i] = static_cast<int32_t>(p);
  }
  return r;
}

void BM_MoeRouterForward(benchmark::State& state) {
  MoeBenchRouting r = moe_bench_routing();
  for (auto _ : state) {
    k::moe_router_forward(view(r.probs, {kMoeN, kMoeE}), view(r.idx, {kMoeN, kMoeK}), view(r.w, {kMoeN, kMoeK}),
                          view(r.logits, {kMoeN, kMoeE}));
    benchmark::DoNotOptimize(r.w.data());
  }
  state.SetItemsProcessed(state.iterations() * kMoeN);
  state.SetBytesProcessed(state.iterations() * (kMoeN * kMoeE * 2 + kMoeM * 2) * int64_t(sizeof(float)));
}

void BM_MoeRouterBackward(benchmark::State& state) {
  MoeBenchRouting r = moe_bench_routing();
  auto dw = normal(kMoeM), aux = normal(kMoeE);
  std::vector<float> dlogits(kMoeN * kMoeE);
  for (auto _ : state) {
    k::moe_router_backward(view(dlogits, {kMoeN, kMoeE}), view(dw, {kMoeN, kMoeK}), view(r.probs, {kMoeN, kMoeE}),
                           view(r.idx, {kMoeN, kMoeK}), view(r.w, {kMoeN, kMoeK}), view(aux, {kMoeE}));
    benchmark::DoNotOptimize(dlogits.data());
  }
  state.SetItemsProcessed(state.iterations() * kMoeN);
  state.SetBytesProcessed(state.iterations() * (kMoeN * kMoeE * 3 + kMoeM * 3) * int64_t(sizeof(float)));
}

void BM_GatherRows(benchmark::State& state) {
  MoeBenchRouting r = moe_bench_routing();
  auto inp = normal(kMoeN * kMoeC);
  std::vector<float> out(kMoeM * kMoeC);
  for (auto _ : state) {
    k::gather_rows(view(out, {kMoeM, kMoeC}), view(inp, {kMoeN, kMoeC}), view(r.rows, {kMoeM}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kMoeM);
  state.SetBytesProcessed(state.iterations() * (kMoeN + kMoeM) * kMoeC * int64_t(sizeof(float)));
}

void BM_ScatterAddRows(benchmark::State& state) {
  MoeBenchRouting r = moe_bench_routing();
  auto dout = normal(kMoeM * kMoeC);
  std::vector<float> dinp(kMoeN * kMoeC);
  for (auto _ : state) {
    k::scatter_add_rows(view(dinp, {kMoeN, kMoeC}), view(dout, {kMoeM, kMoeC}), view(r.rows, {kMoeM}));
    benchmark::DoNotOptimize(dinp.data());
  }
  state.SetItemsProcessed(state.iterations() * kMoeM);
  state.SetBytesProcessed(state.iterations() * (kMoeM + 2 * kMoeN) * kMoeC * int64_t(sizeof(float)));
}

void BM_MoeCombineForward(benchmark::State& state) {
  MoeBenchRouting r = moe_bench_routing();
  auto y = normal(kMoeM * kMoeC);
  std::vector<float> out(kMoeN * kMoeC);
  for (auto _ : state) {
    k::moe_combine_forward(view(out, {kMoeN, kMoeC}), view(y, {kMoeM, kMoeC}), view(r.pos, {kMoeN, kMoeK}),
                           view(r.w, {kMoeN, kMoeK}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kMoeN);
  state.SetBytesProcessed(state.iterations() * (kMoeM + kMoeN) * kMoeC * int64_t(sizeof(float)));
}

void BM_MoeCombineBackward(benchmark::State& state) {
  MoeBenchRouting r = moe_bench_routing();
  auto y = normal(kMoeM * kMoeC), dout = normal(kMoeN * kMoeC);
  std::vector<float> dy(kMoeM * kMoeC), dw(kMoeM);
  for (auto _ : state) {
    k::moe_combine_backward(view(dy, {kMoeM, kMoeC}), view(dw, {kMoeN, kMoeK}), view(dout, {kMoeN, kMoeC}),
                            view(y, {kMoeM, kMoeC}), view(r.pos, {kMoeN, kMoeK}), view(r.w, {kMoeN, kMoeK}));
    benchmark::DoNotOptimize(dy.data());
  }
  state.SetItemsProcessed(state.iterations() * kMoeN);
  state.SetBytesProcessed(state.iterations() * (3 * kMoeM + kMoeN) * kMoeC * int64_t(sizeof(float)));  // dy += reads it
}

BENCHMARK(BM_EncoderForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_EncoderBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_LayernormForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_LayernormBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_GeluForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_MatmulForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_MatmulBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_AttentionForward)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_AttentionForwardRowMax)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_AttentionBackward)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_CrossentropyForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_CrossentropyBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_AdamW)->Arg(1 << 22)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_EmbeddingForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_EmbeddingBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_RmsnormForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_RmsnormBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_Rope)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_SwigluForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_SwigluBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_QkvPackForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_QkvPackBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_MoeRouterForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_MoeRouterBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_GatherRows)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_ScatterAddRows)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_MoeCombineForward)->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_MoeCombineBackward)->Unit(benchmark::kMillisecond)->MinTime(0.2);

}  // namespace

BENCHMARK_MAIN();
