#!/usr/bin/env python3
"""The trainer on CUDA against the trainer on the CPU: 50-step runs of a small GPT-2 (L=4, C=128,
NH=4, T=64, B=8, byte-level State of the Union text), one table row per check appended to
--results (tab-separated: check, value, tolerance, PASS|FAIL, note).

Checks (the value is the largest relative difference of train_loss over the steps compared):
  fp32 AdamW, Muon with fp32 Newton-Schulz, Shampoo with eigh roots and with coupled Newton
  roots: CUDA vs CPU, 1e-3 (the issue's bound for fp32; cuBLAS runs with CUBLAS_COMPUTE_32F, no
  TF32, so the two sides differ by summation order only);
  bf16 compute (fp32 masters) and Muon's bf16 Newton-Schulz: CUDA vs the CPU's fp32, 2e-2 (see
  BF16_TOLERANCE);
  a checkpoint written at step 25 by one device resumed by the other: steps 26..50 against the
  writer's own uninterrupted run, 1e-3, for AdamW, Muon and Shampoo (momenta, statistics and
  inverse roots cross the device boundary);
  the Llama family (model.arch = llama, grouped-query attention 4/2): fp32 AdamW and Muon CUDA vs
  CPU, 1e-3; bf16 AdamW CUDA vs the CPU's fp32, 2e-2;
  the NCCL backend at world size 1 against the default one (both CUDA), 1e-5 (one rank: every
  all-reduce is a copy; the slack only covers any run-to-run nondeterminism, reported beside it).
Beside each fp32 row, the CPU against itself with 1 thread instead of all: how far summation order
alone moves these 50 steps, the scale under which a CUDA-vs-CPU difference proves nothing.
Shampoo runs with epsilon 1e-6 (see OPTIMIZERS) so that this floor stays near 1e-6.

--cpu-rehearsal runs both sides on the CPU (threads 1 against all cores, so the sums still
differ in order and the differences are not all zero), with bf16 replaced by fp32 and nccl by
mpi (which is no communicator at all at world size 1): every run, parse, comparison and row is
exercised; the rows say "rehearsal".

Usage: trainer_checks.py --precon-train BIN --corpus DIR --work DIR --results FILE [--cpu-rehearsal]
Exit 0 when every row passed, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import time

FP32_TOLERANCE = 1e-3
# bf16 keeps 8 significant bits: each rounding of an activation, weight copy or Newton-Schulz
# iterate is off by up to u = 2^-8 = 0.39% relative, and the products accumulate in fp32. One
# step's loss on the same weights then moves by well under 0.5% (the mean over B·T = 512 cross
# entropies averages the rounding errors), but the weights of the two runs drift apart through 50
# updates, each computed from slightly different gradients (or, for Muon, a slightly different
# orthogonalisation). 2e-2 is about 5u: loose enough for that drift at this learning rate, yet
# a real bug (a wrong scale, a missing bf16 -> fp32 master update, a skipped step) moves the
# loss by far more than 2%.
BF16_TOLERANCE = 2e-2
NCCL_TOLERANCE = 1e-5
STEPS, RESUME_AT = 50, 25

MODEL = {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab_size": 256}
# The same size as a Llama: four query heads over two kv heads, Llama's MLP width rule.
LLAMA = ["model.arch=llama", "model.n_kv_head=2"]
OPTIMIZERS = {
    "adamw": ["optimizer.name=adamw", "optimizer.lr=0.001"],
    "muon": ["optimizer.name=muon", "optimizer.lr=0.02", "optimizer.adamw.lr=0.001"],
    # epsilon: at the default 1e-12 the inverse roots of the nearly singular statistics amplify
    # summation order: the CPU alone, 1 thread against 2, differed by 8e-4 (eigh) and 3e-3
    # (newton) over these 50 steps; at 1e-6 by 2e-6 and 1e-6, so 1e-3 tests the GPU path, not
    # the conditioning of the problem.
    "shampoo": ["optimizer.name=shampoo", "optimizer.lr=0.001", "optimizer.shampoo.precondition_frequency=10",
                "optimizer.shampoo.max_preconditioner_dim=256", "optimizer.shampoo.epsilon=1e-6"],
}


class Checks:
    def __init__(self, args):
        self.args = args
        self.rehearsal = args.cpu_rehearsal
        self.work = os.path.abspath(args.work)
        self.rows = []
        self.cache = {}
        # Rehearsing on a shared machine with few cores: OpenMP threads that spin while waiting
        # slow the 2-thread side tenfold; waiting passively changes no result.
        self.env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if self.rehearsal else None
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)

    # -- runs --------------------------------------------------------------------------------
    def device_sets(self, device):
        """The --set entries that put a run on `device` ("cuda", "cpu" or "cpu1": one thread)."""
        if device == "cpu1":
            return ["train.device=cpu", "train.threads=1"]
        if device == "cpu":
            return ["train.device=cpu", "train.threads=1" if self.rehearsal else "train.threads=0"]
        if self.rehearsal:
            return ["train.device=cpu", "train.threads=2"]
        return ["train.device=cuda"]

    def substitute(self, sets):
        """CPU stand-ins for what only CUDA has, under --cpu-rehearsal."""
        if not self.rehearsal:
            return sets
        swap = {"train.precision=bf16": "train.precision=fp32", "optimizer.muon.ns_precision=bf16":
                "optimizer.muon.ns_precision=fp32", "parallel.backend=nccl": "parallel.backend=mpi"}
        return [swap.get(s, s) for s in sets]

    def run(self, name, device, sets, resume=None):
        """Trains (once per name) and returns {step: train_loss}, {step: val_loss}."""
        if name in self.cache:
            return self.cache[name]
        run_dir = os.path.join(self.work, "runs", name)
        cmd = [self.args.precon_train, "--config", self.config, "--run-dir", run_dir,
               "--resume", resume or "never"]
        for s in self.device_sets(device) + self.substitute(sets):
            cmd += ["--set", s]
        log = os.path.join(self.work, "logs", name + ".log")
        t0 = time.time()
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env).returncode
        seconds = time.time() - t0
        train, val = {}, {}
        metrics = os.path.join(run_dir, "metrics.jsonl")
        if rc == 0 and os.path.exists(metrics):
            for line in open(metrics):
                rec = json.loads(line)
                if "train_loss" in rec:
                    train[rec["step"]] = rec["train_loss"]
                if "val_loss" in rec:
                    val[rec["step"]] = rec["val_loss"]
        err = None if rc == 0 else "precon-train exit %d, see logs/%s.log: %s" % (rc, name, tail(log))
        print("trainer_checks: %-24s %-5s %5.1f s %s" % (name, device, seconds, err or ""), flush=True)
        self.cache[name] = (train, val, err, run_dir)
        return self.cache[name]

    # -- rows --------------------------------------------------------------------------------
    def row(self, check, value, tolerance, ok, note=""):
        """Appends the row at once, so a run stopped by a time limit keeps the rows it had."""
        if self.rehearsal:
            note = ("rehearsal (both sides cpu); " + note).rstrip("; ")
        r = (check, value, tolerance, "PASS" if ok else "FAIL", note)
        self.rows.append(r)
        with open(self.args.results, "a") as f:
            f.write("\t".join(str(x) for x in r) + "\n")

    def compare(self, check, a, b, tolerance, steps, note=""):
        """One row: max relative train_loss difference of runs a and b over `steps`."""
        (la, _, ea, _), (lb, _, eb, _) = a, b
        if ea or eb:
            self.row(check, "-", "%.0e" % tolerance, False, ea or eb)
            return
        missing = [s for s in steps if s not in la or s not in lb]
        if missing:
            self.row(check, "-", "%.0e" % tolerance, False, "no train_loss at step(s) %s" % missing[:5])
            return
        worst, at = max((abs(la[s] - lb[s]) / abs(lb[s]), s) for s in steps)
        learned = la[steps[-1]] < la[steps[0]]
        ok = worst <= tolerance and learned
        extra = "max at step %d (%.6g vs %.6g)" % (at, la[at], lb[at])
        if not learned:
            extra += "; the loss did not fall"
        self.row(check, "%.2e" % worst, "%.0e" % tolerance, ok, "; ".join(x for x in (note, extra) if x))

    def floor(self, name, sets):
        """How far the CPU alone moves with the summation order (1 thread against all): the
        scale below which a CUDA-vs-CPU difference is no evidence of a bug."""
        if self.rehearsal:
            return ""
        d = max_rel(self.run(name + "-cpu1", "cpu1", sets)[0], self.cache[name + "-cpu"][0])
        return "cpu 1 thread vs all: %s" % ("%.1e" % d if d is not None else "-")

    # -- the checks ---------------------------------------------------------------------------
    def prepare(self):
        data = os.path.join(self.work, "data")
        subprocess.run([self.args.precon_train, "prepare-data", "--input", self.args.corpus, "--out", data,
                        "--val-fraction", "0.05", "--seq-len", str(MODEL["seq_len"])], check=True,
                       stdout=subprocess.DEVNULL)
        self.config = os.path.join(self.work, "trial.toml")
        with open(self.config, "w") as f:
            f.write("[model]\n" + "".join("%s = %d\n" % kv for kv in MODEL.items()))
            f.write('[data]\ntrain = "%s/train.bin"\nval = "%s/val.bin"\n' % (data, data))
            f.write("[train]\nsteps = %d\nbatch_size = 8\nseed = 1337\neval_every = %d\neval_batches = 4\n"
                    "checkpoint_every = %d\nkeep_checkpoints = 2\ngrad_clip = 1.0\n" % (STEPS, RESUME_AT, RESUME_AT))
            f.write("[optimizer]\nschedule = \"cosine\"\nwarmup_steps = 5\n")

    def main(self):
        self.prepare()
        every = list(range(1, STEPS + 1))
        after = list(range(RESUME_AT + 1, STEPS + 1))
        fp32 = {"adamw": [], "muon": ["optimizer.muon.ns_precision=fp32"],
                "shampoo": ["optimizer.shampoo.root_method=eigh"]}
        for opt, extra in fp32.items():
            sets = OPTIMIZERS[opt] + extra
            g = self.run(opt + "-cuda", "cuda", sets)
            c = self.run(opt + "-cpu", "cpu", sets)
            label = {"adamw": "fp32 adamw", "muon": "fp32 muon, fp32 newton-schulz",
                     "shampoo": "fp32 shampoo, eigh roots"}[opt]
            self.compare(label + ": cuda vs cpu", g, c, FP32_TOLERANCE, every, note=self.floor(opt, sets))
        sets = OPTIMIZERS["shampoo"] + ["optimizer.shampoo.root_method=newton"]
        self.compare("fp32 shampoo, newton roots: cuda vs cpu", self.run("shampoo-newton-cuda", "cuda", sets),
                     self.run("shampoo-newton-cpu", "cpu", sets), FP32_TOLERANCE, every,
                     note=self.floor("shampoo-newton", sets))
        self.compare("bf16 adamw (fp32 masters): cuda vs cpu fp32",
                     self.run("adamw-bf16-cuda", "cuda", OPTIMIZERS["adamw"] + ["train.precision=bf16"]),
                     self.run("adamw-cpu", "cpu", []), BF16_TOLERANCE, every)
        self.compare("muon, bf16 newton-schulz: cuda vs cpu fp32",
                     self.run("muon-bf16ns-cuda", "cuda", OPTIMIZERS["muon"] + ["optimizer.muon.ns_precision=bf16"]),
                     self.run("muon-cpu", "cpu", []), BF16_TOLERANCE, every)

        # The Llama family (RMSNorm, RoPE, grouped-query attention, SwiGLU kernels on the device).
        for opt in ("adamw", "muon"):
            sets = LLAMA + OPTIMIZERS[opt] + fp32[opt]
            self.compare("fp32 llama (gqa 4/2), %s: cuda vs cpu" % opt, self.run("llama-%s-cuda" % opt, "cuda", sets),
                         self.run("llama-%s-cpu" % opt, "cpu", sets), FP32_TOLERANCE, every,
                         note=self.floor("llama-%s" % opt, sets))
        self.compare("bf16 llama adamw (fp32 masters): cuda vs cpu fp32",
                     self.run("llama-adamw-bf16-cuda", "cuda", LLAMA + OPTIMIZERS["adamw"] + ["train.precision=bf16"]),
                     self.run("llama-adamw-cpu", "cpu", []), BF16_TOLERANCE, every)

        ckpt = "checkpoints/step_%08d" % RESUME_AT
        for opt, extra in fp32.items():
            sets = OPTIMIZERS[opt] + extra
            for writer, reader in (("cuda", "cpu"), ("cpu", "cuda")):
                straight = self.run("%s-%s" % (opt, writer), writer, sets)
                resumed = self.run("%s-%s-to-%s" % (opt, writer, reader), reader, sets,
                                   resume=os.path.join(straight[3], ckpt))
                self.compare("resume %s: step %d written on %s, read on %s" % (opt, RESUME_AT, writer, reader),
                             resumed, straight, FP32_TOLERANCE, after,
                             note=first_step_note(resumed, straight, RESUME_AT + 1))

        again = self.run("adamw-cuda-again", "cuda", OPTIMIZERS["adamw"])
        nccl = self.run("adamw-nccl-cuda", "cuda", OPTIMIZERS["adamw"] + ["parallel.backend=nccl"])
        det = max_rel(again[0], self.cache["adamw-cuda"][0])
        self.compare("nccl backend, world size 1: vs default (cuda)", nccl, self.cache["adamw-cuda"],
                     NCCL_TOLERANCE, every, note="two default cuda runs differ by %s" %
                     ("%.2e" % det if det is not None else "-"))

        return 0 if all(r[3] == "PASS" for r in self.rows) else 1


def max_rel(a, b):
    common = sorted(set(a) & set(b))
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in common) if common else None


def first_step_note(resumed, straight, step):
    la, lb = resumed[0], straight[0]
    if step in la and step in lb:
        return "first resumed step %d rel %.1e" % (step, abs(la[step] - lb[step]) / abs(lb[step]))
    return ""


def tail(path):
    lines = [l.strip() for l in open(path, errors="replace") if l.strip()]
    return lines[-1][:200] if lines else ""


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precon-train", required=True)
    ap.add_argument("--corpus", required=True, help="a directory of .txt files")
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True, help="TSV file the rows are appended to")
    ap.add_argument("--cpu-rehearsal", action="store_true", help="both sides on the CPU (no GPU needed)")
    sys.exit(Checks(ap.parse_args()).main())
