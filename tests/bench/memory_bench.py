#!/usr/bin/env python3
"""Per-rank memory of the parallel layouts against one process, side by side in one run.

--model gpt2 (the default): GPT-2 with 8 layers, d_model 512 and a vocabulary of 8192 (29.4M
parameters), in each layout: one process, DP2, TP2, PP2, TP2xDP2, DP4, TP4 and PP4. --model moe: a
Llama mixture of experts (4 layers, d_model 256, 8 experts of width 256, top 2, untied head; 11.5M
parameters, 6.3M of them in the experts) in one process, DP2, TP2, PP2, EP2 (expert parallelism inside DP2),
EP4, TP2xEP2 and PP2xEP2. 6 steps of 8 sequences of 64 tokens, one thread a rank, for AdamW and Muon
(--optimizers; Shampoo and SOAP too on GPT-2; --layouts a subset of the layouts), each with the distributed optimizer (parallel.distributed_optimizer, the default) and without it. For each run the table gives what the busiest rank holds by kind
(memory_param_bytes, memory_grad_bytes, memory_optimizer_bytes, as the trainer reports them), its
state (the three together) over the one process's, Megatron's arithmetic for that ratio (weights
and gradients divided by TP x PP, the state also by DP with the distributed optimizer, the first
pipeline stage holding the embedding beside its blocks as Megatron places it; replicated rows and
activations left out), the largest peak resident memory of a rank over the one process's
(measured outside the trainer by /usr/bin/time, each rank's maximum resident set), and the mean
step time after the first. Megatron's arithmetic for expert parallelism: the experts' weights and
gradients divided by TP x PP x EP, the other rows' by TP x PP, the optimizer state of both also by
the data-parallel ranks that share it with the distributed optimizer (DP for the dense rows, DP/EP
for the experts', so DP in all), by EP for the experts' without it.

With --before BUILD, that build's precon-train (an earlier commit's) runs the same layouts in its
own way (no parallel.distributed_optimizer key; no memory_* records: its state columns stay empty),
layout by layout right after this build's runs of the layout. For Shampoo and SOAP the "megatron"
column is the same division as Muon's (their matrix state lives with its owner only), not a figure
of Megatron's, which has neither.

Usage: tests/bench/memory_bench.py [--model gpt2|moe] [--build build] [--before OLD_BUILD] [--steps 6]
                                   [--optimizers adamw,muon] [--layouts TP2,DP4]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_launch  # noqa: E402

MODELS = {
    "gpt2": "[model]\nn_layer = 8\nn_head = 8\nd_model = 512\nseq_len = 64\nvocab_size = 8192\n",
    "moe": "[model]\narch = \"llama\"\nn_layer = 4\nn_head = 8\nd_model = 256\nffn_hidden = 512\nseq_len = 64\n"
           "vocab_size = 8192\n[model.moe]\nexperts = 8\ntop_k = 2\nffn_hidden = 256\n",
}
OPTIMIZERS = {
    "adamw": "[optimizer]\nname = \"adamw\"\nlr = 0.001\n",
    "muon": "[optimizer]\nname = \"muon\"\nlr = 0.02\n",
    "shampoo": "[optimizer]\nname = \"shampoo\"\nlr = 0.001\n",
    "soap": "[optimizer]\nname = \"soap\"\nlr = 0.003\n",
}
# name: (tensor, data, pipeline, expert)
LAYOUTS = {
    "gpt2": {"one": (1, 1, 1, 1), "DP2": (1, 2, 1, 1), "TP2": (2, 1, 1, 1), "PP2": (1, 1, 2, 1),
             "TP2xDP2": (2, 2, 1, 1), "DP4": (1, 4, 1, 1), "TP4": (4, 1, 1, 1), "PP4": (1, 1, 4, 1)},
    "moe": {"one": (1, 1, 1, 1), "DP2": (1, 2, 1, 1), "TP2": (2, 1, 1, 1), "PP2": (1, 1, 2, 1),
            "EP2": (1, 2, 1, 2), "EP4": (1, 4, 1, 4), "TP2xEP2": (2, 2, 1, 2), "PP2xEP2": (1, 2, 2, 2)},
}


def expert_share(model, optimizer):
    """The experts' fraction of one process's (weights and gradients, optimizer state): their
    parameters over all of them, and their optimizer floats over all of them (AdamW: two a parameter
    everywhere; Muon: one, the momentum, for a matrix, two for the AdamW-routed embedding, head and
    norms)."""
    if model != "moe":
        return 0.0, 0.0
    L, C, V, F, E, Fe = 4, 256, 8192, 512, 8, 256
    experts = L * E * 3 * C * Fe
    matrices = L * (4 * C * C + E * C) + experts  # attention, router, experts (the MLP is all experts)
    other = 2 * V * C + L * 2 * C + C  # embedding, head, norms
    total = matrices + other
    if optimizer == "adamw":
        return experts / total, experts / total
    return experts / total, experts / (matrices + 2 * other)


def config(path, shard, model, optimizer, steps):
    with open(path, "w") as f:
        f.write(MODELS[model] + OPTIMIZERS[optimizer])
        f.write("[data]\ntrain = \"%s\"\nval = \"%s\"\n" % (shard, shard))
        f.write("[train]\nsteps = %d\nbatch_size = 8\nlog_every = 1\neval_every = 0\ncheckpoint_every = 0\n"
                "threads = 1\n" % steps)


def run_layout(build, cfg, run_dir, model, layout, distributed):
    t, d, p, e = LAYOUTS[model][layout]
    ranks = t * d * p
    sets = ["--set", "parallel.tensor=%d" % t, "--set", "parallel.data=%d" % d, "--set", "parallel.pipeline=%d" % p]
    if e > 1:
        sets += ["--set", "parallel.expert=%d" % e]
    if distributed is not None:
        sets += ["--set", "parallel.distributed_optimizer=%s" % ("true" if distributed else "false")]
    # Each rank under /usr/bin/time, writing its peak resident set (KiB) to rss.<rank>.
    rss = os.path.join(run_dir + "_rss")
    command = ["sh", "-c", 'exec /usr/bin/time -f %M -o "$0.${OMPI_COMM_WORLD_RANK:-0}" "$@"', rss,
               bench_launch.trainer(build), "--config", cfg, "--run-dir", run_dir, "--resume", "never"] + sets
    if ranks > 1:
        command = bench_launch.mpirun(ranks, command)
    records = bench_launch.train(command, run_dir)
    peak = 0
    for r in range(ranks):
        with open("%s.%d" % (rss, r)) as f:
            peak = max(peak, int(f.read().split()[-1]) * 1024)
    last = records[-1]
    steps = [r["step_seconds"] for r in records[1:]] or [records[0]["step_seconds"]]
    return {
        "params": last.get("memory_param_bytes"),
        "grads": last.get("memory_grad_bytes"),
        "optimizer": last.get("memory_optimizer_bytes"),
        "peak": peak,
        "step": statistics.mean(steps),
    }


def end_params(model):
    """The parameters a pipeline's end stages hold beside their blocks, as Megatron places them: (the
    busiest stage's, all that one process holds of them). GPT-2: the first stage wte and wpe, the
    last a copy of the tied wte that one process does not hold. The Llama: the first stage the
    embedding, the last the untied head, as large."""
    if model == "gpt2":
        return 8192 * 512 + 64 * 512, 8192 * 512 + 64 * 512
    return 8192 * 256, 2 * 8192 * 256


def arithmetic(one, model, optimizer, layout, distributed):
    """Megatron's per-rank share of weights, gradients and optimizer state (one's bytes by kind),
    on the busiest rank: with pipeline stages the first, which holds the embedding beside its
    blocks (vocabulary-split by TP, not divided by PP)."""
    t, d, p, e = LAYOUTS[model][layout]
    weights, state = expert_share(model, optimizer)
    busiest, ends = (4 * n for n in end_params(model)) if p > 1 else (0, 0)  # bytes of their values
    opt_by = t * (d if distributed else 1)

    def held(v, f, scale, dense_by, expert_by):
        # scale: values of the kind per parameter at the ends (the embedding and head are AdamW's
        # under every optimizer: two moments a value).
        rest = v * (1 - f) - scale * ends
        return scale * busiest / dense_by + rest / (dense_by * p) + v * f / (expert_by * p)

    opt = held(one["optimizer"], state, 2, opt_by, t * (d if distributed else e))
    return ((held(one["params"], weights, 1, t, t * e) + held(one["grads"], weights, 1, t, t * e) + opt) /
            (one["params"] + one["grads"] + one["optimizer"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    parser.add_argument("--build", default="build")
    parser.add_argument("--before", help="an earlier build to run side by side")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--optimizers", default="adamw,muon",
                        help="comma-separated, of %s (shampoo and soap: --model gpt2)" % ", ".join(OPTIMIZERS))
    parser.add_argument("--layouts", help="comma-separated layout names (default: all; one process always runs)")
    args = parser.parse_args()
    optimizers = args.optimizers.split(",")
    for optimizer in optimizers:
        if optimizer not in OPTIMIZERS:
            parser.error("--optimizers: unknown optimizer %r (known: %s)" % (optimizer, ", ".join(OPTIMIZERS)))
        if args.model != "gpt2" and optimizer in ("shampoo", "soap"):
            parser.error("--optimizers: %s is measured on --model gpt2 only" % optimizer)
    layouts = list(LAYOUTS[args.model])
    if args.layouts:
        asked = args.layouts.split(",")
        for layout in asked:
            if layout not in LAYOUTS[args.model]:
                parser.error("--layouts: unknown layout %r for --model %s (known: %s)" %
                             (layout, args.model, ", ".join(LAYOUTS[args.model])))
        layouts = ["one"] + [layout for layout in layouts if layout in asked and layout != "one"]
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step is left out of the mean)")
    work = tempfile.mkdtemp(prefix="precon_memory_bench_")
    try:
        shard = os.path.join(work, "train.bin")
        bench_launch.write_shard(shard, 200000, 8192)
        builds = [("now", args.build)] + ([("before", args.before)] if args.before else [])
        print("%-7s %-8s %-8s %-6s %10s %10s %10s %8s %8s %8s %8s" %
              ("build", "optim", "layout", "distop", "params MB", "grads MB", "optim MB", "state", "megatron",
               "peak", "step s"))
        for optimizer in optimizers:
            cfg = os.path.join(work, "%s.toml" % optimizer)
            config(cfg, shard, args.model, optimizer, args.steps)
            ones = {}
            # Layout by layout, each build's runs one after another: the columns compared are
            # measured minutes apart, not a whole table apart.
            for layout in layouts:
                for build_name, build in builds:
                    for distributed in ([None] if layout == "one" else [True, False]):
                        if build_name == "before" and distributed is not None:
                            if not distributed:
                                continue
                            distributed = None  # the earlier build has no such key: its own behaviour
                        run_dir = os.path.join(work, "%s_%s_%s_%s" % (build_name, optimizer, layout, distributed))
                        m = run_layout(build, cfg, run_dir, args.model, layout, distributed)
                        if layout == "one":
                            ones[build_name] = m
                        one = ones[build_name]
                        known = m["params"] is not None and one["params"] is not None
                        state = ((m["params"] + m["grads"] + m["optimizer"]) /
                                 (one["params"] + one["grads"] + one["optimizer"])) if known else float("nan")
                        megatron = arithmetic(one, args.model, optimizer, layout, distributed is not False) if one["params"] else float("nan")
                        mb = lambda v: "%10.1f" % (v / 2**20) if v is not None else "%10s" % "-"
                        print("%-7s %-8s %-8s %-6s %s %s %s %8.2f %8.2f %8.2f %8.3f" %
                              (build_name, optimizer, layout, {None: "-", True: "on", False: "off"}[distributed],
                               mb(m["params"]), mb(m["grads"]), mb(m["optimizer"]), state, megatron,
                               m["peak"] / one["peak"] if m["peak"] and one["peak"] else float("nan"), m["step"]),
                              flush=True)
                        shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
