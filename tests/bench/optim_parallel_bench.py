#!/usr/bin/env python3
"""The distributed optimizers on this machine, side by side in one run.

1. Optimizer step time (tests/bench/optim_parallel_bench.cpp under mpirun -np 2, 1 thread a rank):
   one process vs DP=2 duplicated (every rank does all the work) vs DP=2 owners; Muon's full step
   and Shampoo's refresh step (precondition_frequency 1), on L6 C384 and (--gpt2) GPT-2 124M shapes.
   Targets: owners >= 1.7x faster than duplicated (Muon), >= 1.7x faster than one rank (Shampoo).
2. Bytes communicated per step and rank at DP=2 (precon-train's metrics: the gradient sums
   comm_bytes, all-reduced or, for Muon's matrices, reduced to their owner, plus the optimizer's
   all-gathers optim_comm_bytes; ring/tree costs, the busiest rank's) for AdamW, Muon fp32/bf16 and
   Shampoo fp32/bf16, as a ratio of AdamW's. Target: Muon <= 1.25x AdamW (Moonlight's bound).

Usage: tests/bench/optim_parallel_bench.py [--build build] [--gpt2] [--repeats 3]
(needs a build with -DPRECON_BUILD_BENCHMARKS=ON)
"""
import argparse
import os
import sys
import tempfile

from bench_launch import mpirun, run, train, trainer as trainer_of, write_shard


def bytes_per_step(trainer, work, optimizer, extra):
    cfg = os.path.join(work, "c.toml")
    with open(cfg, "w") as f:
        f.write("[model]\nn_layer = 6\nn_head = 6\nd_model = 384\nseq_len = 64\nvocab_size = 256\n")
        f.write('[data]\ntrain = "%s/train.bin"\nval = ""\n' % work)
        f.write("[train]\nsteps = 2\nbatch_size = 4\neval_every = 0\ncheckpoint_every = 0\nlog_every = 1\nthreads = 1\n")
        f.write('[optimizer]\nname = "%s"\n%s' % (optimizer, extra))
        f.write("[parallel]\ndata = 2\n")
    run_dir = os.path.join(work, "run_" + optimizer + str(abs(hash(extra))))
    r = train(mpirun(2, [trainer, "--config", cfg, "--run-dir", run_dir]), run_dir)[-1]
    return r["comm_bytes"], r.get("optim_comm_bytes", 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--gpt2", action="store_true", help="also GPT-2 124M shapes (minutes on 2 cores)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    bench = os.path.join(a.build, "tests", "bench", "precon_optim_parallel_bench")
    trainer = trainer_of(a.build)
    for path, target in ((bench, "precon_optim_parallel_bench"), (trainer, "precon-train")):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} is missing: build it first (cmake --build {a.build} --target {target}; "
                     "benchmarks need -DPRECON_BUILD_BENCHMARKS=ON)")
    print("== optimizer step, seconds ==")
    for model in ["l6c384"] + (["gpt2"] if a.gpt2 else []):
        print(run(mpirun(2, [bench, "--model", model, "--repeats", str(a.repeats)]), capture=True), end="")
    print("\n== bytes per step and rank at DP=2, L6 C384 (gradient sums + optimizer all-gathers) ==")
    with tempfile.TemporaryDirectory() as work:
        write_shard(os.path.join(work, "train.bin"), 20000, 256)
        cases = [("adamw", "adamw", ""),
                 ("muon fp32", "muon", "[optimizer.muon]\ncomm_dtype = \"fp32\"\n"),
                 ("muon bf16", "muon", "[optimizer.muon]\ncomm_dtype = \"bf16\"\n"),
                 ("shampoo fp32", "shampoo", "[optimizer.shampoo]\ncomm_dtype = \"fp32\"\n"),
                 ("shampoo bf16", "shampoo", "[optimizer.shampoo]\ncomm_dtype = \"bf16\"\n")]
        base = None
        print("%-14s %14s %14s %14s %10s" % ("optimizer", "gradient MB", "optimizer MB", "total MB", "vs adamw"))
        for label, opt, extra in cases:
            grad, optim = bytes_per_step(trainer, work, opt, extra)
            total = grad + optim
            base = base or total
            print("%-14s %14.2f %14.2f %14.2f %9.3fx" % (label, grad / 1e6, optim / 1e6, total / 1e6, total / base))


if __name__ == "__main__":
    main()
