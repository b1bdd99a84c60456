#!/usr/bin/python3
"""Training throughput, side by side: precon-train against a PyTorch implementation of the same
GPT-2 (Debian's python3-torch), same thread count, on random tokens.

PyTorch runs in its best environment (passive OpenMP waiting, glibc keeping large buffers);
precon-train in its default one. Configs: (a) GPT-2 124M shape at B=4, T=64 and (b) L=6, C=384,
NH=6 at B=8, T=256, both with V=50257. Prints ms/step, tokens/s, % of this machine's sgemm rate
(6·N·tokens FLOPs, N = parameters), peak memory, Muon/Shampoo step time over AdamW's per phase
and Newton–Schulz GFLOP/s on its nominal count.

Usage: /usr/bin/python3 tests/bench/train_vs_torch.py [--build-dir build] [--threads 2] [--steps 6]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": "4294967296",
             "MALLOC_TRIM_THRESHOLD_": "68719476736"}
CONFIGS = {"a": dict(n_layer=12, n_head=12, d_model=768, seq_len=64, vocab_size=50257, batch=4),
           "b": dict(n_layer=6, n_head=6, d_model=384, seq_len=256, vocab_size=50257, batch=8)}

TORCH_SCRIPT = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
from gpt_reference import forward, param_table
c = json.loads(sys.argv[2]); steps = int(sys.argv[3]); torch.set_num_threads(int(sys.argv[4]))
g = torch.Generator().manual_seed(0)
p = {}
for name, shape in param_table(c):
    t = torch.randn(shape, generator=g) * 0.02 if len(shape) == 2 else torch.zeros(shape)
    if "ln_" in name and name.endswith("weight"):
        t = torch.ones(shape)
    p[name] = t.requires_grad_(True)
opt = torch.optim.AdamW(list(p.values()), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)
times = []
for s in range(steps):
    data = torch.randint(0, c["vocab_size"], (c["batch"], c["seq_len"] + 1), generator=g)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    _, loss = forward(p, c, data[:, :-1], data[:, 1:])
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
print(json.dumps({"step_seconds": times}))
"""


def run_measured(cmd, env):
    """Runs cmd; returns (stdout, peak RSS in MB)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return out, usage


def peak_mb_of(cmd, env):
    """Runs cmd under a fresh python wrapper so RUSAGE_CHILDREN covers only it."""
    wrapper = ("import resource, subprocess, sys, json; r = subprocess.run(sys.argv[1:], capture_output=True, "
               "text=True); print(json.dumps({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr[-3000:], "
               "'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    res = subprocess.run([sys.executable, "-c", wrapper] + cmd, env=env, capture_output=True, text=True, check=True)
    info = json.loads(res.stdout)
    if info["rc"] != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{info['err']}")
    return info["out"], info["maxrss_kb"] / 1024.0


def param_count(c):
    C, V, T, L = c["d_model"], c["vocab_size"], c["seq_len"], c["n_layer"]
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def ns_nominal_flops(c, steps=5):
    C, L = c["d_model"], c["n_layer"]
    def one(rows, cols):
        m, n = min(rows, cols), max(rows, cols)
        return steps * (4 * m * m * n + 2 * m ** 3)
    # c_attn as three (C, C) blocks (split_qkv), attn.c_proj, mlp.c_fc, mlp.c_proj
    return L * (3 * one(C, C) + one(C, C) + one(4 * C, C) + one(C, 4 * C))


def write_shard(path, n, vocab, seed):
    rng = np.random.default_rng(seed)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, vocab, n, dtype=np.uint16).tobytes())


def sgemm_rate(build_dir, threads):
    exe = os.path.join(build_dir, "tests", "bench", "precon_bench_linalg")
    res = subprocess.run([exe, "--benchmark_format=json", "--benchmark_filter=Sgemm/1536"], capture_output=True,
                         text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return json.loads(res.stdout)["benchmarks"][0]["GFLOP/s"]


def run_precon(build_dir, tmp, name, c, optimizer, steps, threads):
    run_dir = os.path.join(tmp, f"run_{name}_{optimizer}")
    cfg = os.path.join(tmp, f"{name}_{optimizer}.toml")
    opt_extra = {"adamw": "", "muon": "[optimizer.muon]\nns_steps = 5\n",
                 "shampoo": "[optimizer.shampoo]\nprecondition_frequency = 10\nmax_preconditioner_dim = 1024\n"}
    with open(cfg, "w") as f:
        f.write(f"[model]\nn_layer = {c['n_layer']}\nn_head = {c['n_head']}\nd_model = {c['d_model']}\n"
                f"seq_len = {c['seq_len']}\nvocab_size = {c['vocab_size']}\n"
                f"[data]\ntrain = \"{tmp}/train.bin\"\nval = \"{tmp}/val.bin\"\n"
                f"[train]\nsteps = {steps}\nbatch_size = {c['batch']}\neval_every = 0\neval_batches = 1\n"
                f"checkpoint_every = 0\nkeep_checkpoints = 1\nthreads = {threads}\n"
                f"[optimizer]\nname = \"{optimizer}\"\nlr = 0.0001\nwarmup_steps = 0\n{opt_extra[optimizer]}")
    exe = os.path.join(build_dir, "worker", "precon-train")
    _, peak = peak_mb_of([exe, "--config", cfg, "--run-dir", run_dir, "--resume", "never"], dict(os.environ))
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "step_seconds" in l]
    recs = recs[2:]  # the first steps warm caches and page in buffers
    mean = lambda k: sum(r[k] for r in recs) / len(recs)
    phases = {k: mean(f"optim_{k}_seconds") for k in ("newton_schulz", "statistics", "inverse_root", "grafting")}
    return {"step": mean("step_seconds"), "optim": mean("optim_seconds"), "phases": phases, "peak_mb": peak}


def run_torch(c, steps, threads):
    env = dict(os.environ, **TORCH_ENV)
    cmd = [sys.executable, "-c", TORCH_SCRIPT, os.path.join(HERE, "..", "worker"), json.dumps(c), str(steps),
           str(threads)]
    out, peak = peak_mb_of(cmd, env)
    times = json.loads(out.strip().splitlines()[-1])["step_seconds"][2:]
    return {"step": sum(times) / len(times), "peak_mb": peak}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--configs", default="a,b")
    args = ap.parse_args()
    rate = sgemm_rate(args.build_dir, args.threads)
    print(f"threads {args.threads}; sgemm {rate:.0f} GFLOP/s (this run)\n")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        write_shard(os.path.join(tmp, "train.bin"), 4_000_000, 50257, 1)
        write_shard(os.path.join(tmp, "val.bin"), 200_000, 50257, 2)
        print(f"{'config':<7}{'impl':<22}{'ms/step':>9}{'tokens/s':>10}{'% sgemm':>9}{'peak MB':>9}  target")
        for name in args.configs.split(","):
            c = CONFIGS[name]
            tokens = c["batch"] * c["seq_len"]
            flops = 6.0 * param_count(c) * tokens
            t = run_torch(c, args.steps, args.threads)
            res = {o: run_precon(args.build_dir, tmp, name, c, o, args.steps, args.threads)
                   for o in ("adamw", "muon", "shampoo")}
            def row(label, step, peak, target=""):
                pct = 100.0 * flops / step / 1e9 / rate
                print(f"({name})    {label:<22}{step * 1e3:>9.0f}{tokens / step:>10.0f}{pct:>8.0f}%{peak:>9.0f}  {target}")
                return pct
            row("pytorch adamw", t["step"], t["peak_mb"])
            pct = row("precon adamw", res["adamw"]["step"], res["adamw"]["peak_mb"], ">= 75% of sgemm: ")
            passed = pct >= 75.0
            ok &= passed
            print(f"{'':<38}speed-up over pytorch {t['step'] / res['adamw']['step']:.2f}x; "
                  f"{'ok' if passed else 'MISSED'}")
            for o in ("muon", "shampoo"):
                r = res[o]
                ph = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in r["phases"].items() if v > 0)
                print(f"({name})    precon {o:<15}{r['step'] * 1e3:>9.0f}{tokens / r['step']:>10.0f}"
                      f"{'':>9}{r['peak_mb']:>9.0f}  {r['step'] / res['adamw']['step']:.2f}x adamw; "
                      f"optimizer {r['optim'] * 1e3:.0f} ms ({ph})")
            ns = res["muon"]["phases"]["newton_schulz"]
            if ns > 0:
                gf = ns_nominal_flops(c) / ns / 1e9
                target = gf / rate >= 0.8
                if name == "b":
                    ok &= target
                print(f"{'':<38}newton-schulz {gf:.0f} GFLOP/s nominal = {100 * gf / rate:.0f}% of sgemm"
                      f"{' (target >= 80%: ' + ('ok' if target else 'MISSED') + ')' if name == 'b' else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
