#!/usr/bin/python3
"""Training throughput, side by side: precon-train's Llama (model.arch = "llama") against PyTorch
running the same model (Debian's python3-torch), same thread count, AdamW on both, random tokens.

The PyTorch side is tests/worker/model/llama_reference.py's forward (HF LlamaForCausalLM: RMSNorm, RoPE
rotate_half, grouped-query attention through repeat_kv, SwiGLU, untied head) on fp32 parameters:
that forward computes in its parameters' dtype, so the bench's fp32 init keeps it in fp32 (the
golden tensors are fp64 only because its main() casts). PyTorch runs in its best environment
(passive OpenMP waiting, glibc keeping large buffers) with torch.optim.AdamW(foreach=True), and
once more under torch.compile when this torch has it (1.13 has not; the notes say so, and that it
has no F.scaled_dot_product_attention or F.rms_norm to fuse with). Gradient clipping is off on both
sides so they do the same work. precon-train runs twice: in its default environment (the
target's row) and in PyTorch's, since active OpenMP waiting costs it most on a busy machine.

Configs: (tiny) recipes/llama-muon-vs-adamw.toml's model, L4 C128 NH4/NKV2 F384 T128 V256 B16;
(25m) L6 C512 NH8/NKV4 F1408 T256 V8192 B4, 26.1M parameters; (ds) a small model of DeepSeek-V3's
family: L4 C256 NH4, multi-head latent attention (q latent 96, kv latent 64, heads 32+16 / 32),
the first layer dense (F688), then 16 routed experts of F128 (top 2) and a shared one behind a
sigmoid router with its bias balance, T128 V4096 B8, on the PyTorch side
tests/worker/model/deepseek_moe_reference.py's forward (each expert's tokens gathered, its three
matmuls, the weighted outputs added back) and its bias update after each step. Prints ms/step,
tokens/s, % of this machine's sgemm rate (6·N·tokens FLOPs, N the parameters a token passes
through: the chosen experts', when precon_bench_linalg is built), peak memory, and precon's
tokens/s over PyTorch's against the project's target of 1.2× (reported, not asserted).

With ds, a second table: precon-train's per-rank memory with MLA against grouped-query attention at
the same size (the ds model with model.mla off and two kv heads of 64: same layers, width, heads
and experts): the parameters and activations it reports (memory_param_bytes,
memory_activation_bytes), the peak resident set, tokens/s (in PyTorch's environment, as the rows
above), and the values an inference KV cache would hold per token and layer, at T128 and T512.

Usage: /usr/bin/python3 tests/bench/llama_vs_torch.py [--build-dir build] [--threads 2] [--steps 6]
       [--configs tiny,25m,ds]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": "4294967296",
             "MALLOC_TRIM_THRESHOLD_": "68719476736"}
LLAMA = dict(arch="llama", rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=0)
CONFIGS = {"tiny": dict(LLAMA, n_layer=4, n_head=4, n_kv_head=2, d_model=128, ffn_hidden=384, seq_len=128,
                        vocab_size=256, batch=16),
           "25m": dict(LLAMA, n_layer=6, n_head=8, n_kv_head=4, d_model=512, ffn_hidden=1408, seq_len=256,
                       vocab_size=8192, batch=4),
           "ds": dict(LLAMA, n_layer=4, n_head=4, n_kv_head=0, d_model=256, ffn_hidden=688, seq_len=128,
                      vocab_size=4096, batch=8, reference="deepseek_moe_reference",
                      mla=dict(q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                               v_head_dim=32),
                      moe=dict(experts=16, top_k=2, ffn_hidden=128, shared_experts=1, first_dense_layers=1,
                               aux_loss_coeff=0.0, router="sigmoid", route_scale=2.5, n_group=1, topk_group=1,
                               bias_update_rate=1e-3, seq_aux_loss_coeff=1e-3))}
WARMUP = 2  # the first steps warm caches and page in buffers
TARGET = 1.2

# argv: the model references' dir (tests/worker/model), config JSON, steps, threads, variant (eager | compile). Prints the
# step times, or {"skipped": why} when the variant cannot run on this torch.
TORCH_SCRIPT = r"""
import json, sys, time, torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import importlib
c = json.loads(sys.argv[2]); steps = int(sys.argv[3]); torch.set_num_threads(int(sys.argv[4]))
ref = importlib.import_module(c.get("reference", "llama_reference"))
variant = sys.argv[5]
forward = ref.forward
after_step = ref.update_biases(c) if hasattr(ref, "update_biases") else None
if variant == "compile":
    if not hasattr(torch, "compile"):
        print(json.dumps({"skipped": f"torch {torch.__version__} has no torch.compile"})); sys.exit(0)
    forward = torch.compile(ref.forward)
g = torch.Generator().manual_seed(0)
p = {}
for name, shape, kind, *_ in ref.param_table(c):
    t = torch.ones(shape) if kind == "norm" else torch.zeros(shape) if kind == "buffer" else torch.randn(shape, generator=g) * 0.02
    p[name] = t.requires_grad_(kind != "buffer")
opt = torch.optim.AdamW([t for t in p.values() if t.requires_grad], lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0,
                        foreach=True)
times = []
for s in range(steps):
    data = torch.randint(0, c["vocab_size"], (c["batch"], c["seq_len"] + 1), generator=g)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    try:
        out = forward(p, c, data[:, :-1], data[:, 1:])
        loss = out[1] + out[2] if len(out) == 4 else out[1]  # deepseek: cross-entropy + balance loss
        loss.backward()
    except Exception as e:  # torch.compile needs a compiler toolchain; offline it may have none
        if variant != "compile":
            raise
        print(json.dumps({"skipped": f"torch.compile failed: {type(e).__name__}: {str(e)[:120]}"})); sys.exit(0)
    opt.step()
    if after_step:
        with torch.no_grad():
            after_step(p, (None, None, out[3]))
    times.append(time.perf_counter() - t0)
fused = [f for f in ("scaled_dot_product_attention", "rms_norm") if hasattr(F, f)]
print(json.dumps({"step_seconds": times, "torch": torch.__version__, "dtype": str(loss.dtype), "fused": fused}))
"""


def peak_mb_of(cmd, env):
    """Runs cmd under a fresh python wrapper so RUSAGE_CHILDREN covers only it; returns (stdout, peak RSS MB)."""
    wrapper = ("import resource, subprocess, sys, json; r = subprocess.run(sys.argv[1:], capture_output=True, "
               "text=True); print(json.dumps({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr[-3000:], "
               "'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    res = subprocess.run([sys.executable, "-c", wrapper] + cmd, env=env, capture_output=True, text=True, check=True)
    info = json.loads(res.stdout)
    if info["rc"] != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{info['err']}")
    return info["out"], info["maxrss_kb"] / 1024.0


def param_count(c):
    """The parameters a token passes through. llama_reference.param_table's total: embeddings, untied
    head, q/k/v/o, gate/up/down, norms; a model with a reference of its own: its table's, less the
    routed experts a token does not visit."""
    if "reference" in c:
        sys.path.insert(0, os.path.join(HERE, "..", "worker", "model"))
        ref = __import__(c["reference"])
        moe = c["moe"]
        total = sum(int(np.prod(shape)) for _, shape, kind, *_ in ref.param_table(c) if kind != "buffer")
        expert = 3 * c["d_model"] * moe["ffn_hidden"]
        return total - (c["n_layer"] - moe["first_dense_layers"]) * (moe["experts"] - moe["top_k"]) * expert
    C, V, F_, L = c["d_model"], c["vocab_size"], c["ffn_hidden"], c["n_layer"]
    kv = c["n_kv_head"] * (C // c["n_head"])
    return 2 * V * C + L * (2 * C * C + 2 * C * kv + 3 * C * F_ + 2 * C) + C


def write_shard(path, n, vocab, seed):
    rng = np.random.default_rng(seed)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, vocab, n, dtype=np.uint16).tobytes())


def sgemm_rate(build_dir, threads):
    """This machine's sgemm GFLOP/s now, or None when the benchmarks are not built."""
    exe = os.path.join(build_dir, "tests", "bench", "precon_bench_linalg")
    if not os.access(exe, os.X_OK):
        return None
    res = subprocess.run([exe, "--benchmark_format=json", "--benchmark_filter=Sgemm/1536"], capture_output=True,
                         text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return json.loads(res.stdout)["benchmarks"][0]["GFLOP/s"]


def toml_table(name, d):
    return f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items())


def run_precon(build_dir, tmp, name, c, steps, threads, env, tag):
    run_dir = os.path.join(tmp, f"run_{name}_{tag}")
    cfg = os.path.join(tmp, f"{name}.toml")
    with open(cfg, "w") as f:
        f.write(f"[model]\narch = \"llama\"\nn_layer = {c['n_layer']}\nn_head = {c['n_head']}\n"
                f"n_kv_head = {c['n_kv_head']}\nd_model = {c['d_model']}\nffn_hidden = {c['ffn_hidden']}\n"
                f"seq_len = {c['seq_len']}\nvocab_size = {c['vocab_size']}\ntie_embeddings = false\n"
                f"rope_theta = {c['rope_theta']}\nnorm_eps = {c['norm_eps']}\n"
                f"[data]\ntrain = \"{tmp}/train_{name}.bin\"\nval = \"{tmp}/val_{name}.bin\"\n"
                f"[train]\nsteps = {steps}\nbatch_size = {c['batch']}\neval_every = 0\neval_batches = 1\n"
                f"checkpoint_every = 1000000\nkeep_checkpoints = 1\nthreads = {threads}\ngrad_clip = 0\n"
                f"[optimizer]\nname = \"adamw\"\nlr = 0.0001\nwarmup_steps = 0\n")
        for table in ("mla", "moe"):
            if table in c:
                f.write(toml_table(f"model.{table}", c[table]))
    exe = os.path.join(build_dir, "worker", "precon-train")
    _, peak = peak_mb_of([exe, "--config", cfg, "--run-dir", run_dir, "--resume", "never"], env)
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "step_seconds" in l][WARMUP:]
    return {"step": sum(r["step_seconds"] for r in recs) / len(recs), "peak_mb": peak,
            "param_mb": recs[-1]["memory_param_bytes"] / 2**20, "activation_mb": recs[-1]["memory_activation_bytes"] / 2**20}


def mla_vs_gqa(build_dir, tmp, steps, threads):
    """precon-train's memory and speed with the ds model's MLA against GQA at the same size."""
    ds = CONFIGS["ds"]
    gqa = {k: v for k, v in ds.items() if k != "mla"}
    gqa["n_kv_head"] = 2
    print(f"\n{'attention (torch env)':<34}{'params M':>9}{'param MB':>9}{'activ. MB':>10}{'peak MB':>9}"
          f"{'tokens/s':>10}{'KV cache/token':>16}")
    for T in (128, 512):
        for label, c in ((f"MLA (kv latent 64+16), T{T}", ds), (f"GQA (2 kv heads of 64), T{T}", gqa)):
            c = dict(c, seq_len=T, batch=ds["batch"] * 128 // T)
            name = f"{'mla' if 'mla' in c else 'gqa'}{T}"
            write_shard(os.path.join(tmp, f"train_{name}.bin"), 1_000_000, c["vocab_size"], 1)
            write_shard(os.path.join(tmp, f"val_{name}.bin"), 100_000, c["vocab_size"], 2)
            r = run_precon(build_dir, tmp, name, c, steps, threads, dict(os.environ, **TORCH_ENV), "mem")
            n = r["param_mb"] * 2**20 / 4 / 1e6
            # What inference would cache per token and layer: MLA its latent and rotary key, GQA k and v.
            m = c.get("mla")
            kv = m["kv_lora_rank"] + m["qk_rope_head_dim"] if m else 2 * c["n_kv_head"] * c["d_model"] // c["n_head"]
            print(f"{label:<34}{n:>9.2f}{r['param_mb']:>9.1f}{r['activation_mb']:>10.1f}{r['peak_mb']:>9.0f}"
                  f"{c['batch'] * T / r['step']:>10.0f}{f'{kv} values':>16}")


def run_torch(c, steps, threads, variant):
    env = dict(os.environ, **TORCH_ENV)
    cmd = [sys.executable, "-c", TORCH_SCRIPT, os.path.join(HERE, "..", "worker", "model"), json.dumps(c), str(steps),
           str(threads), variant]
    out, peak = peak_mb_of(cmd, env)
    res = json.loads(out.strip().splitlines()[-1])
    if "skipped" in res:
        return res
    times = res["step_seconds"][WARMUP:]
    return dict(res, step=sum(times) / len(times), peak_mb=peak)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--configs", default="tiny,25m")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        sys.exit(f"--steps must exceed the {WARMUP} warm-up steps")
    rate = sgemm_rate(args.build_dir, args.threads)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"threads {args.threads}; sgemm {f'{rate:.0f} GFLOP/s' if rate else 'n/a (benchmarks not built)'}; "
          f"load average {load}; {args.steps - WARMUP} timed steps after {WARMUP} warm-up\n")
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'config':<7}{'impl':<24}{'ms/step':>9}{'tokens/s':>10}{'% sgemm':>9}{'peak MB':>9}  vs pytorch")
        for name in args.configs.split(","):
            c = CONFIGS[name]
            write_shard(os.path.join(tmp, f"train_{name}.bin"), 1_000_000, c["vocab_size"], 1)
            write_shard(os.path.join(tmp, f"val_{name}.bin"), 100_000, c["vocab_size"], 2)
            tokens = c["batch"] * c["seq_len"]
            flops = 6.0 * param_count(c) * tokens
            eager = run_torch(c, args.steps, args.threads, "eager")
            compiled = run_torch(c, args.steps, args.threads, "compile")
            envs = {"precon adamw": dict(os.environ), "precon adamw, torch env": dict(os.environ, **TORCH_ENV)}
            precon = {label: run_precon(args.build_dir, tmp, name, c, args.steps, args.threads, env, i)
                      for i, (label, env) in enumerate(envs.items())}

            def row(label, r, extra=""):
                pct = f"{100.0 * flops / r['step'] / 1e9 / rate:>8.0f}%" if rate else f"{'':>9}"
                print(f"({name:<4}) {label:<24}{r['step'] * 1e3:>9.0f}{tokens / r['step']:>10.0f}{pct}"
                      f"{r['peak_mb']:>9.0f}  {extra}")

            row("pytorch adamw", eager)
            best = eager
            if "skipped" in compiled:
                notes.append(f"({name}) torch.compile skipped: {compiled['skipped']}")
            else:
                row("pytorch compile adamw", compiled, f"{eager['step'] / compiled['step']:.2f}x eager")
                best = min(eager, compiled, key=lambda r: r["step"])
            for label, r in precon.items():
                ratio = best["step"] / r["step"]
                row(label, r, f"{ratio:.2f}x (target >= {TARGET:.1f}x: {'ok' if ratio >= TARGET else 'below'})")
            notes.append(f"({name}) {param_count(c) / 1e6:.2f}M parameters; pytorch {eager['torch']}, "
                         f"{c.get('reference', 'llama_reference')}.forward in {eager['dtype']}; fused attention/RMSNorm in this torch: "
                         f"{', '.join(eager['fused']) or 'none'}")
        if "ds" in args.configs.split(","):
            mla_vs_gqa(args.build_dir, tmp, args.steps, args.threads)
    print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
