"""What the benches that start precon-train share (parallel_bench.py, optim_parallel_bench.py,
pipeline_bench.py): a token shard to train on, the command and environment that start ranks under
mpirun on this machine, and the training records a run wrote.

The environment: mpirun runs as root only with OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); a rank's idle
OpenMP threads wait passively (OMP_WAIT_POLICY) instead of spinning on the cores the other ranks
need; ranks talk through shared memory only (btl self,vader). --oversubscribe and --bind-to none let
more ranks than cores share a small machine.
"""
import json
import os
import random
import struct
import subprocess
import sys

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE",
           OMPI_MCA_btl="self,vader")


def mpirun(ranks, command):
    """`command` (a list) started as `ranks` ranks on this machine."""
    return ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] + list(command)


def trainer(build):
    """precon-train of the build directory `build`."""
    return os.path.abspath(os.path.join(build, "worker", "precon-train"))


def write_shard(path, n, vocab):
    """A token shard of n tokens drawn below vocab (seed 5), in the trainer's format: a header of
    256 int32 (magic, version, count), then uint16 tokens."""
    rng = random.Random(5)
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % n, *[rng.randrange(vocab) for _ in range(n)]))


def run(command, capture=False):
    """Runs command with ENV; its stdout when capture. A failure ends the bench with the command's
    exit status and the end of what it wrote to stderr."""
    r = subprocess.run(command, env=ENV, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("%s\nexited with %d:\n%s" % (" ".join(command), r.returncode, r.stderr[-4000:]))
    return r.stdout if capture else None


def train(command, run_dir):
    """Runs a precon-train command writing to run_dir; the training records of its metrics.jsonl
    (the lines with train_loss, as dicts), in the order written."""
    run(command)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if "train_loss" in line]
