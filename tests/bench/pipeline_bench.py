#!/usr/bin/env python3
"""Pipeline parallelism on this machine, side by side in one run: PP=2 (two ranks, one thread
each) with v = 1 (1F1B) and v = 2 (interleaved 1F1B, two model chunks a rank) against one process
with two threads, on the same model, global batch and micro-batches, for m = 4, 8, 16
micro-batches of `--micro` sequences.

Prints the bubble the trainer measured (pipeline_bubble_fraction: each stage's time in the
schedule not spent in its forward/backward passes, over the time spent in them, summed over the
stages; median step after warm-up) next to the theory (p - 1)/(m v), and tokens/s of the runs
with their ratio to the one process.

Usage: tests/bench/pipeline_bench.py [--build build] [--steps 10] [--micro 2]
"""
import argparse
import os
import statistics
import sys
import tempfile

from bench_launch import mpirun, train, trainer as trainer_of, write_shard

MODELS = {
    "L4 C128 T128": dict(n_layer=4, n_head=4, d_model=128, seq_len=128, vocab_size=256),
    "L8 C256 T128": dict(n_layer=8, n_head=4, d_model=256, seq_len=128, vocab_size=256),
}
STAGES = 2


def config(path, data_dir, model, steps, batch, micro):
    with open(path, "w") as f:
        f.write("[model]\n" + "".join("%s = %d\n" % kv for kv in model.items()))
        f.write('[data]\ntrain = "%s/train.bin"\nval = ""\n' % data_dir)
        f.write("[train]\nsteps = %d\nbatch_size = %d\nmicro_batch_size = %d\neval_every = 0\ncheckpoint_every = 0\n"
                "log_every = 1\n" % (steps, batch, micro))
        f.write('[optimizer]\nname = "adamw"\nwarmup_steps = 0\n')


def run(cmd, run_dir):
    rows = train(cmd, run_dir)[2:]  # warm-up
    tokens = statistics.median(r["tokens_per_second"] for r in rows)
    bubble = statistics.median(r["pipeline_bubble_fraction"] for r in rows) if "pipeline_bubble_fraction" in rows[0] else None
    return tokens, bubble


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--micro", type=int, default=2)
    a = ap.parse_args()
    trainer = trainer_of(a.build)
    tmp = tempfile.mkdtemp(prefix="precon_pipeline_bench_")
    write_shard(os.path.join(tmp, "train.bin"), 600000, 256)
    print("%-14s %4s %2s %6s %17s %15s %14s %14s %7s" % ("model", "m", "v", "batch", "theory (p-1)/(mv)",
                                                         "measured bubble", "1 proc tok/s", "PP=2 tok/s", "ratio"))
    for name, model in MODELS.items():
        for m in (4, 8, 16):
            batch = m * a.micro
            cfg = os.path.join(tmp, "c.toml")
            config(cfg, tmp, model, a.steps, batch, a.micro)
            one_dir = os.path.join(tmp, "one")
            one, _ = run([trainer, "--config", cfg, "--run-dir", one_dir, "--resume", "never", "--set",
                          "train.threads=2"], one_dir)
            for v in (1, 2):
                pp_dir = os.path.join(tmp, "pp2v%d" % v)
                pp, bubble = run(mpirun(STAGES, [trainer, "--config", cfg, "--run-dir", pp_dir, "--resume", "never",
                                                 "--set", "train.threads=1", "--set", "parallel.pipeline=%d" % STAGES,
                                                 "--set", "parallel.virtual_stages=%d" % v]), pp_dir)
                print("%-14s %4d %2d %6d %17.3f %15.3f %14.0f %14.0f %7.2f" % (
                    name, m, v, batch, (STAGES - 1) / (m * v), bubble, one, pp, pp / one))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
