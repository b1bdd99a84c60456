#!/usr/bin/python3
"""The mixture-of-experts layer, side by side with PyTorch, and the all-to-all's share of a step.

1. The layer alone, forward + backward (router, top-k, renormalised weights, the aux loss's
   gradient, the experts, the combine), tokens/s: precon_moe_layer_bench (worker/parallel/moe.h,
   each expert one GEMM over its gathered block) against PyTorch written the obvious way
   (index_select of each expert's tokens, its three matmuls, index_add_ of the weighted outputs;
   autograd for the backward), same shape, same thread count, median of the timed passes.
2. precon-train on a small MoE Llama under `mpirun -np 2` with parallel.data = 2 and
   parallel.expert = 2: the median over steps of moe_alltoall_seconds / step_seconds (rank 0's
   seconds in the forward and backward all-to-alls over its step time), with the same run at
   EP = 1 beside it.

Prints two tables; nothing is asserted.
Usage: /usr/bin/python3 tests/bench/moe_vs_torch.py [--build-dir build] [--threads 2] [--iters 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LAYERS = {  # N tokens, C channels, E experts, K per token, F expert width
    "small N2048 C128 E8 k2 F192": dict(tokens=2048, channels=128, experts=8, top_k=2, ffn=192),
    "medium N4096 C512 E16 k2 F512": dict(tokens=4096, channels=512, experts=16, top_k=2, ffn=512),
}
TORCH_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

TORCH_SCRIPT = r"""
import json, sys, time, torch
import torch.nn.functional as F
c = json.loads(sys.argv[1]); iters = int(sys.argv[2]); torch.set_num_threads(int(sys.argv[3]))
N, C, E, K, Fw = c["tokens"], c["channels"], c["experts"], c["top_k"], c["ffn"]
g = torch.Generator().manual_seed(5)
def w(*shape):
    return (torch.randn(*shape, generator=g) * 0.02).requires_grad_()
router = w(E, C)
gate = [w(Fw, C) for _ in range(E)]; up = [w(Fw, C) for _ in range(E)]; down = [w(C, Fw) for _ in range(E)]
x = torch.randn(N, C, generator=g).requires_grad_()
dout = torch.randn(N, C, generator=g) * 1e-3
def layer(x):
    probs = torch.softmax(x @ router.t(), dim=-1)
    top_w, top_i = torch.topk(probs, K, dim=-1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    f = torch.zeros(E)
    for e in range(E):
        tok, slot = (top_i == e).nonzero(as_tuple=True)
        f[e] = tok.numel() / (N * K)
        if tok.numel() == 0:
            continue
        xe = x.index_select(0, tok)
        ye = (F.silu(xe @ gate[e].t()) * (xe @ up[e].t())) @ down[e].t()
        out = out.index_add(0, tok, ye * top_w[tok, slot].unsqueeze(1))
    aux = 1e-2 * E * (f * probs.mean(0)).sum()
    return out, aux
times = []
for i in range(iters + 2):
    t0 = time.perf_counter()
    out, aux = layer(x)
    torch.autograd.backward([out, aux], [dout, torch.ones(())])
    times.append(time.perf_counter() - t0)
    for p in [router, x] + gate + up + down:
        p.grad = None
s = sorted(times[2:])[len(times[2:]) // 2]
print(json.dumps({"seconds": s, "tokens_per_second": N / s}))
"""


def layer_rows(build_dir, threads, iters):
    exe = os.path.join(build_dir, "tests", "bench", "precon_moe_layer_bench")
    rows = []
    for name, c in LAYERS.items():
        args = [exe, "--iters", str(iters), "--threads", str(threads)]
        for k, v in c.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        ours = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        theirs = json.loads(subprocess.run([sys.executable, "-c", TORCH_SCRIPT, json.dumps(c), str(iters), str(threads)],
                                           capture_output=True, text=True, check=True,
                                           env=dict(os.environ, **TORCH_ENV)).stdout)
        rows.append((name, theirs["tokens_per_second"], ours["tokens_per_second"],
                     ours["tokens_per_second"] / theirs["tokens_per_second"]))
    return rows


def write_shard(path, n, vocab):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.random.default_rng(5).integers(0, vocab, n, dtype=np.uint16).tobytes())


def ep_share(build_dir, tmp, expert, steps):
    cfg = os.path.join(tmp, f"ep{expert}.toml")
    with open(cfg, "w") as f:
        f.write("[model]\narch = \"llama\"\nn_layer = 4\nn_head = 4\nn_kv_head = 2\nd_model = 256\nseq_len = 128\n"
                "vocab_size = 256\n[model.moe]\nexperts = 8\ntop_k = 2\nffn_hidden = 256\n"
                f"[data]\ntrain = \"{tmp}/train.bin\"\nval = \"\"\n"
                f"[train]\nsteps = {steps}\nbatch_size = 16\neval_every = 0\ncheckpoint_every = 0\nthreads = 1\n"
                f"[optimizer]\nname = \"adamw\"\nwarmup_steps = 0\n[parallel]\ndata = 2\nexpert = {expert}\n")
    run_dir = os.path.join(tmp, f"run_ep{expert}")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE",
               OMPI_MCA_btl="self,vader")
    subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none",
                    os.path.join(build_dir, "worker", "precon-train"), "--config", cfg, "--run-dir", run_dir,
                    "--resume", "never"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "step_seconds" in l][2:]
    step = statistics.median(r["step_seconds"] for r in recs)
    share = statistics.median(r.get("moe_alltoall_seconds", 0.0) / r["step_seconds"] for r in recs)
    return step, statistics.median(r["tokens_per_second"] for r in recs), share


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    print(f"MoE layer forward + backward, {a.threads} thread(s), median of {a.iters} passes (tokens/s)")
    print(f"| {'layer':<30} | {'PyTorch':>9} | {'precon':>9} | {'ratio':>6} |")
    print(f"|{'-' * 32}|{'-' * 11}|{'-' * 11}|{'-' * 8}|")
    for name, torch_tps, ours, ratio in layer_rows(a.build_dir, a.threads, a.iters):
        print(f"| {name:<30} | {torch_tps:>9.0f} | {ours:>9.0f} | {ratio:>5.2f}x |")
    with tempfile.TemporaryDirectory() as tmp:
        write_shard(os.path.join(tmp, "train.bin"), 200000, 256)
        print(f"\nprecon-train, MoE L4 C256 E8 k2 F256 T128 B16, mpirun -np 2 (DP=2, 1 thread a rank), "
              f"median of {a.steps - 2} steps")
        print(f"| {'layout':<12} | {'s/step':>7} | {'tokens/s':>9} | {'all-to-all share':>16} |")
        print(f"|{'-' * 14}|{'-' * 9}|{'-' * 11}|{'-' * 18}|")
        for expert in (1, 2):
            step, tps, share = ep_share(a.build_dir, tmp, expert, a.steps)
            print(f"| {'EP=%d' % expert:<12} | {step:>7.3f} | {tps:>9.0f} | {share * 100:>15.1f}% |")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"\n({time.time() - started:.0f} s)")
