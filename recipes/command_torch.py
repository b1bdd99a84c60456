#!/usr/bin/env python3
"""A small PyTorch training script that precon runs as a trial's program (recipes/command_torch.toml).

It knows nothing of precon beyond what docs/recipes.md, Trials that run any program, promises:
- it runs in the trial's run directory ($PRECON_RUN_DIR) and appends one JSON line per step to
  metrics.jsonl there: {"step": N, "loss": ..., "val_loss": ..., "step_seconds": ..., "flops": ...}
  (the seconds the step took and the FLOPs so far, which the leaderboard ranks by);
- on SIGTERM (early stopping, a cancel) or SIGUSR1 (a Slurm time limit or preemption notice) it
  writes a checkpoint and exits 75; precon then records the trial as pruned or cancelled, or
  launches it again with PRECON_RESUME=1, and it carries on from the checkpoint;
- a bad argument exits 2 (argparse's code), which precon does not retry.

The model is a two-layer MLP fitted to a fixed synthetic regression task with full-batch SGD and
momentum: every step is deterministic, so a run that is stopped and resumed writes the same curve
as one that is not.
"""
import argparse
import json
import os
import signal
import sys
import time

import torch

EXIT_REQUEUE = 75


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, required=True, help="SGD learning rate")
    p.add_argument("--hidden", type=int, default=16, help="hidden units")
    p.add_argument("--steps", type=int, default=40, help="training steps")
    p.add_argument("--seed", type=int, default=0, help="initialisation seed")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="seconds to wait after each step (so that a stop can be watched)")
    p.add_argument("--preempt-at", type=int, default=0,
                   help="on the first attempt, act as if preempted after this step (0: never)")
    args = p.parse_args()
    if args.lr <= 0 or args.hidden < 1 or args.steps < 1:
        p.error("--lr, --hidden and --steps must be positive")
    return args


def data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(256, 1, generator=g)
    return x[:192], y[:192], x[192:], y[192:]


def main():
    args = parse_args()
    torch.set_num_threads(1)
    run_dir = os.environ.get("PRECON_RUN_DIR", ".")
    checkpoint = os.path.join(run_dir, "checkpoint.pt")
    metrics = os.path.join(run_dir, "metrics.jsonl")

    x_train, y_train, x_val, y_val = data()
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.MSELoss()

    step = 0
    if os.environ.get("PRECON_RESUME") == "1" and os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        # Records after the checkpoint are computed again: drop them.
        with open(metrics) as f:
            kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
        with open(metrics + ".tmp", "w") as f:
            f.writelines(kept)
        os.replace(metrics + ".tmp", metrics)
        print(f"resumed from step {step}", file=sys.stderr, flush=True)

    stop = []
    signal.signal(signal.SIGTERM, lambda sig, frame: stop.append("SIGTERM"))
    signal.signal(signal.SIGUSR1, lambda sig, frame: stop.append("SIGUSR1"))

    def save_and_exit(why):
        # Under Slurm the job script sends the signal again every 0.2 s until the program has
        # exited, and Python's shutdown gives handled signals their default action back (which
        # ends the process): ignored signals it leaves ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)
        print(f"checkpoint at step {step} ({why}); exiting {EXIT_REQUEUE}", file=sys.stderr, flush=True)
        sys.exit(EXIT_REQUEUE)

    # Forward and backward of the two matrix products: 6 FLOPs per weight and sample.
    flops_per_step = 6 * x_train.shape[0] * (8 * args.hidden + args.hidden)
    with open(metrics, "a") as out:
        while step < args.steps:
            if stop:
                save_and_exit(stop[0])
            started = time.monotonic()
            opt.zero_grad()
            loss = loss_fn(model(x_train), y_train)
            loss.backward()
            opt.step()
            step += 1
            with torch.no_grad():
                val = loss_fn(model(x_val), y_val)
            if args.step_time > 0:
                time.sleep(args.step_time)
            record = {"step": step, "loss": loss.item(), "val_loss": val.item(),
                      "step_seconds": time.monotonic() - started, "flops": step * flops_per_step}
            out.write(json.dumps(record) + "\n")
            out.flush()
            if step == args.preempt_at and os.environ.get("PRECON_ATTEMPT", "1") == "1":
                save_and_exit("preempted")


if __name__ == "__main__":
    main()
