#!/usr/bin/env python3
"""Data parallelism on this machine, side by side in one run: one process with 2 threads vs
DP=2 with 1 thread per rank (mpirun), on the quickstart model and on L6 C384 T256 B8.
Prints tokens/s (median step after warm-up), gradient bytes all-reduced per step and rank, the
share of the step spent waiting for that all-reduce, and DP=2's throughput as a ratio of one
process's (target >= 0.9), and TP=2 with 1 thread per rank.

Usage: tests/bench/parallel_bench.py [--build build] [--steps 12]
"""
import argparse
import os
import statistics
import sys
import tempfile

from bench_launch import mpirun, train, trainer as trainer_of, write_shard

MODELS = {
    "quickstart L4 C128 T128 B16": dict(n_layer=4, n_head=4, d_model=128, seq_len=128, vocab_size=256, batch_size=16),
    "L6 C384 T256 B8": dict(n_layer=6, n_head=6, d_model=384, seq_len=256, vocab_size=256, batch_size=8),
}


def config(path, data_dir, model, steps):
    m = dict(model)
    batch = m.pop("batch_size")
    with open(path, "w") as f:
        f.write("[model]\n" + "".join("%s = %d\n" % kv for kv in m.items()))
        f.write('[data]\ntrain = "%s/train.bin"\nval = ""\n' % data_dir)
        f.write("[train]\nsteps = %d\nbatch_size = %d\neval_every = 0\ncheckpoint_every = 0\nlog_every = 1\n"
                % (steps, batch))
        f.write('[optimizer]\nname = "adamw"\nwarmup_steps = 0\n')


def run(cmd, run_dir):
    rows = train(cmd, run_dir)[3:]  # warm-up
    sec = statistics.median(r["step_seconds"] for r in rows)
    wait = statistics.median(r.get("comm_wait_seconds", 0.0) for r in rows)
    comm = statistics.median(r.get("comm_bytes", 0.0) for r in rows)
    return rows[0]["tokens_per_second"] * rows[0]["step_seconds"] / sec, comm, wait / sec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    trainer = trainer_of(a.build)
    tmp = tempfile.mkdtemp(prefix="precon_parallel_bench_")
    write_shard(os.path.join(tmp, "train.bin"), 400000, 256)
    print("%-30s %-18s %12s %14s %10s %8s" % ("model", "layout", "tokens/s", "comm B/step", "comm %", "ratio"))
    for name, model in MODELS.items():
        cfg = os.path.join(tmp, "c.toml")
        config(cfg, tmp, model, a.steps)
        one_dir, dp_dir = os.path.join(tmp, "one"), os.path.join(tmp, "dp2")
        one = run([trainer, "--config", cfg, "--run-dir", one_dir, "--resume", "never", "--set", "train.threads=2"], one_dir)
        dp = run(mpirun(2, [trainer, "--config", cfg, "--run-dir", dp_dir, "--resume", "never", "--set", "train.threads=1",
                            "--set", "parallel.data=2"]), dp_dir)
        tp_dir = os.path.join(tmp, "tp2")
        tp = run(mpirun(2, [trainer, "--config", cfg, "--run-dir", tp_dir, "--resume", "never", "--set", "train.threads=1",
                            "--set", "parallel.tensor=2"]), tp_dir)
        print("%-30s %-18s %12.0f %14s %10s %8s" % (name, "1 proc x 2 thr", one[0], "0", "0", "1.00"))
        print("%-30s %-18s %12.0f %14.0f %9.1f%% %8.2f" % (name, "DP=2 x 1 thr", dp[0], dp[1], 100 * dp[2], dp[0] / one[0]))
        # TP's activations all-reduces are inside the step; its gradient sum is reported like DP's.
        print("%-30s %-18s %12.0f %14.0f %9.1f%% %8.2f" % (name, "TP=2 x 1 thr", tp[0], tp[1], 100 * tp[2], tp[0] / one[0]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
