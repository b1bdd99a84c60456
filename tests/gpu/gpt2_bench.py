#!/usr/bin/env python3
"""GPT-2 124M training throughput: precon-train (AdamW, Muon, Shampoo) side by side with the same
model in PyTorch (eager and torch.compile; AdamW, and torch.optim.Muon where this torch has it),
on the same device in one run. Prints one table: tokens/s, step time, optimizer share of the step,
and MFU against a peak (790 TFLOP/s bf16 for the H200: dense bf16 with fp32 accumulation).

Model: GPT-2 small (L=12, H=12, C=768, T=1024, vocabulary 50257, tied head), bf16 compute with
fp32 master weights on both sides. Batch: `--batch` sequences per optimizer step (default 64 =
65,536 tokens, the batch the Muon target is stated at), run as micro-batches of `--micro`
sequences with gradient accumulation; when a precon run does not fit (out of memory) the
micro-batch is halved and the run repeated, and the row says which one ran.

FLOPs per token (nanoGPT's estimate, as used for MFU in the literature): 6 N + 12 L C T, with N
the parameters without the position embedding (the tied token embedding counts once: it is also
the head's matrix), the second term the attention scores and their weighted sum.

Data: precon's GPT-2 BPE shards of the State of the Union corpus (prepare-data --encoder/--vocab)
when the GPT-2 files are given, else its byte-level shards (the token values do not change the
work done).

--cpu-rehearsal: a 2-layer C=128 T=64 model on the CPU, fp32, a few steps: exercises every run,
parse and row of the script on a machine without a GPU (torch.compile rows say n/a where this
torch has no compile).

Usage: gpt2_bench.py --precon-train BIN --corpus DIR --work DIR [--gpt2-dir DIR] [--table FILE]
                     [--steps N] [--batch B] [--micro M] [--peak-tflops P] [--cpu-rehearsal]
Exit 0 when every row ran (the targets are reported, not asserted).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

GPT2 = {"n_layer": 12, "n_head": 12, "d_model": 768, "seq_len": 1024, "vocab_size": 50257}
TINY = {"n_layer": 2, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab_size": 50257}
OPTIMIZERS = {
    "adamw": ["optimizer.name=adamw", "optimizer.lr=0.0006"],
    "muon": ["optimizer.name=muon", "optimizer.lr=0.02", "optimizer.adamw.lr=0.0006",
             "optimizer.muon.ns_precision=bf16"],
    "shampoo": ["optimizer.name=shampoo", "optimizer.lr=0.0006", "optimizer.shampoo.precondition_frequency=10",
                "optimizer.shampoo.max_preconditioner_dim=1024"],
}


def flops_per_token(m):
    L, C, T, V = m["n_layer"], m["d_model"], m["seq_len"], m["vocab_size"]
    n = V * C + L * (12 * C * C + 13 * C) + 2 * C  # wte, blocks (weights + biases + norms), ln_f
    return 6 * n + 12 * L * C * T


class Bench:
    def __init__(self, args):
        self.args = args
        self.rehearsal = args.cpu_rehearsal
        self.model = dict(TINY if self.rehearsal else GPT2)
        self.device = "cpu" if self.rehearsal else "cuda"
        self.work = os.path.abspath(args.work)
        self.rows = []
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        self.env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if self.rehearsal else None

    # -- data and config ---------------------------------------------------------------------
    def prepare(self):
        data = os.path.join(self.work, "data")
        cmd = [self.args.precon_train, "prepare-data", "--input", self.args.corpus, "--out", data,
               "--val-fraction", "0.02"]
        gpt2 = self.args.gpt2_dir
        if gpt2 and os.path.exists(os.path.join(gpt2, "encoder.json")):
            cmd += ["--encoder", os.path.join(gpt2, "encoder.json"), "--vocab", os.path.join(gpt2, "vocab.bpe")]
            self.data_note = "GPT-2 BPE"
        else:
            self.data_note = "byte-level"
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        self.train_bin = os.path.join(data, "train.bin")
        self.config = os.path.join(self.work, "gpt2.toml")
        with open(self.config, "w") as f:
            f.write("[model]\n" + "".join("%s = %d\n" % kv for kv in self.model.items()))
            f.write('[data]\ntrain = "%s/train.bin"\nval = "%s/val.bin"\n' % (data, data))
            f.write("[train]\nseed = 1337\neval_every = 0\nlog_every = 1\ncheckpoint_every = 0\n"
                    "grad_clip = 1.0\n")
            f.write("[optimizer]\nschedule = \"constant\"\nwarmup_steps = 0\n")

    # -- precon ------------------------------------------------------------------------------
    def precon(self, opt):
        micro = self.args.micro
        while micro >= 1:
            name = "precon-%s-mb%d" % (opt, micro)
            run_dir = os.path.join(self.work, "runs", name)
            sets = ["train.steps=%d" % self.args.steps, "train.batch_size=%d" % self.args.batch,
                    "train.micro_batch_size=%d" % micro]
            if self.rehearsal:
                sets += ["train.device=cpu", "train.precision=fp32", "train.threads=0"]
                sets += [s for s in OPTIMIZERS[opt] if "ns_precision" not in s]
            else:
                sets += ["train.device=cuda", "train.precision=bf16"] + OPTIMIZERS[opt]
            cmd = [self.args.precon_train, "--config", self.config, "--run-dir", run_dir, "--resume", "never"]
            for s in sets:
                cmd += ["--set", s]
            log = os.path.join(self.work, "logs", name + ".log")
            t0 = time.time()
            with open(log, "w") as f:
                f.write("$ " + " ".join(cmd) + "\n")
                f.flush()
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env).returncode
            print("gpt2_bench: %-28s exit %d in %.1f s" % (name, rc, time.time() - t0), flush=True)
            text = open(log, errors="replace").read()
            if rc != 0 and ("out of memory" in text.lower() or "cudaErrorMemoryAllocation" in text) and micro > 1:
                micro //= 2
                continue
            if rc != 0:
                last = [l for l in text.splitlines() if l.strip()][-1:] or [""]
                return self.row("precon " + opt, None, None, None, "exit %d: %s" % (rc, last[0][:160]))
            records = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
            steps = [r for r in records if "step_seconds" in r]
            timed = steps[self.args.warmup:] or steps[-1:]
            step_s = sum(r["step_seconds"] for r in timed) / len(timed)
            optim_s = sum(r.get("optim_seconds", 0.0) for r in timed) / len(timed)
            return self.row("precon " + opt, step_s, optim_s, micro, "")
        return None

    # -- PyTorch -----------------------------------------------------------------------------
    def torch_runs(self):
        try:
            import torch
        except ImportError:
            for label in ("pytorch adamw, eager", "pytorch adamw, torch.compile"):
                self.row(label, None, None, None, "no torch in %s" % sys.executable)
            return
        from gpt2_torch import GPT, batches
        dev = torch.device(self.device)
        has_compile = hasattr(torch, "compile")
        has_muon = hasattr(torch.optim, "Muon")
        # torch.compile for AdamW only: compiling costs about a minute of the GPU machine's time.
        cases = [("adamw", False), ("adamw", True)] + ([("muon", False)] if has_muon else [])
        for opt, compiled in cases:
            label = "pytorch %s, %s" % (opt, "torch.compile" if compiled else "eager")
            if compiled and not has_compile:
                self.row(label, None, None, None, "n/a: torch %s has no torch.compile" % torch.__version__)
                continue
            micro = self.args.micro
            while micro >= 1:
                try:
                    step_s, optim_s = self.torch_one(torch, GPT, batches, dev, opt, compiled, micro)
                    self.row(label, step_s, optim_s, micro, "torch %s" % torch.__version__)
                    break
                except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else MemoryError:
                    torch.cuda.empty_cache()
                    micro //= 2
                except Exception as e:  # report, keep the other rows
                    self.row(label, None, None, None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120]))
                    break
        if not has_muon:
            self.row("pytorch muon, eager", None, None, None, "n/a: torch %s has no torch.optim.Muon" % torch.__version__)

    def torch_one(self, torch, GPT, batches, dev, opt, compiled, micro):
        torch.manual_seed(1337)
        bf16 = not self.rehearsal
        if not self.rehearsal:
            torch.backends.cuda.matmul.allow_tf32 = False  # precon's cuBLAS runs without TF32 too
        model = GPT(self.model).to(dev)
        if opt == "adamw":
            optimizers = [torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.0,
                                            **({"fused": True} if dev.type == "cuda" else {}))]
        else:  # torch.optim.Muon takes 2-D hidden matrices only; the rest goes to AdamW (as precon routes it)
            hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and n.startswith("h.")]
            rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and n.startswith("h."))]
            optimizers = [torch.optim.Muon(hidden, lr=0.02, momentum=0.95, nesterov=True),
                          torch.optim.AdamW(rest, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.0)]
        step_fn = torch.compile(model) if compiled else model
        data = batches(self.train_bin, self.model["seq_len"], micro, dev)
        accum = max(1, self.args.batch // micro)
        sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
        step_times, optim_times = [], []
        for step in range(self.args.steps):
            sync()
            t0 = time.perf_counter()
            for _ in range(accum):
                x, y = next(data)
                with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
                    loss = step_fn(x, y) / accum
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            sync()
            t1 = time.perf_counter()
            for o in optimizers:
                o.step()
                o.zero_grad(set_to_none=True)
            sync()
            t2 = time.perf_counter()
            step_times.append(t2 - t0)
            optim_times.append(t2 - t1)
            if not math.isfinite(loss.item()):
                raise RuntimeError("loss is not finite at step %d" % (step + 1))
        w = self.args.warmup
        timed = step_times[w:] or step_times[-1:]
        otimed = optim_times[w:] or optim_times[-1:]
        del model, optimizers, step_fn
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        return sum(timed) / len(timed), sum(otimed) / len(otimed)

    # -- table -------------------------------------------------------------------------------
    def row(self, label, step_s, optim_s, micro, note):
        tokens = self.args.batch * self.model["seq_len"]
        if step_s is None:
            r = [label, "-", "-", "-", "-", "-", note or "did not run"]
        else:
            tps = tokens / step_s
            mfu = tps * flops_per_token(self.model) / (self.args.peak_tflops * 1e12)
            r = [label, "%.0f" % tps, "%.1f" % (step_s * 1e3), "%.1f%%" % (100 * optim_s / step_s),
                 "%.1f%%" % (100 * mfu), str(micro), note]
        self.rows.append(r)
        return r

    def table(self):
        head = ["run", "tokens/s", "step ms", "optimizer", "MFU", "micro", "note"]
        w = [max(len(str(r[i])) for r in self.rows + [head]) for i in range(6)]
        out = ["GPT-2 %s L%d C%d T%d, batch %d sequences (%d tokens), %s data, %s, peak %.0f TFLOP/s, "
               "%d steps (first %d not timed)" % ("small" if not self.rehearsal else "tiny (rehearsal)",
                                                  self.model["n_layer"], self.model["d_model"],
                                                  self.model["seq_len"], self.args.batch,
                                                  self.args.batch * self.model["seq_len"], self.data_note,
                                                  self.device, self.args.peak_tflops, self.args.steps,
                                                  self.args.warmup)]
        line = lambda r: "  ".join(str(r[i]).rjust(w[i]) if i else str(r[i]).ljust(w[i]) for i in range(6)) + \
            "  " + r[6]
        out += [line(head), "  ".join("-" * x for x in w) + "  ----"] + [line(r) for r in self.rows]
        pairs = [("precon adamw", "pytorch adamw, eager", "target >= 1.0"),
                 ("precon adamw", "pytorch adamw, torch.compile", "target >= 1/1.2 = 0.83")]
        for a, b, target in pairs:
            va = next((float(x[1]) for x in self.rows if x[0] == a and x[1] != "-"), None)
            vb = next((float(x[1]) for x in self.rows if x[0] == b and x[1] != "-"), None)
            out.append("%s / %s tokens/s: %s (%s)" % (a, b, "%.2f" % (va / vb) if va and vb else "-", target))
        muon = next((x for x in self.rows if x[0] == "precon muon" and x[1] != "-"), None)
        out.append("precon muon optimizer share of the step: %s (target <= 10%%)" % (muon[3] if muon else "-"))
        text = "\n".join(out) + "\n"
        print(text, end="")
        if self.args.table:
            with open(self.args.table, "w") as f:
                f.write(text)

    def main(self):
        self.prepare()
        for opt in ("adamw", "muon", "shampoo"):
            self.precon(opt)
        self.torch_runs()
        self.table()
        return 0 if all(r[1] != "-" or r[6].startswith("n/a") for r in self.rows) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precon-train", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--gpt2-dir", default="")
    ap.add_argument("--table", default="")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3, help="first steps not timed")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--peak-tflops", type=float, default=790.0)
    ap.add_argument("--cpu-rehearsal", action="store_true")
    args = ap.parse_args()
    if args.cpu_rehearsal and args.batch == 64:
        args.batch, args.micro, args.steps, args.warmup = 8, 4, 4, 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    return Bench(args).main()


if __name__ == "__main__":
    sys.exit(main())
