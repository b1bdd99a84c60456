#!/usr/bin/python3
"""A controller holding one huge sweep: how long submitting, listing, cancelling, restarting and
stopping take, and how long /healthz keeps the user waiting meanwhile.

    tests/bench/scale_bench.py --precon build/orchestrator/precon [--trials 3000 100000]

For each size it starts a real `precon serve` on a fresh database (one CPU slot; the trials are a
tiny model of a few steps, so one runs at a time and the rest wait), submits a random sweep of
that many trials and times, one after the other: the submit, GET /api/v1/experiments,
/api/v1/dashboard/experiments, /api/v1/experiments/{id}/best, /metrics, a SIGTERM shutdown, a
restart (until /healthz answers), the same reads again, the cancel of the experiment, and a
final SIGTERM. A thread asks /healthz every 50 ms throughout (except while the bench itself stops
and starts the server); its p50/p99/max latency (a failed or 5 s probe counts as 5 s) is the
last column. A request that takes longer than --timeout seconds is shown as ">T" and the run
goes on; a server that does not stop within --timeout seconds is killed (shown as ">T").
"""
import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

RECIPE = """
[experiment]
name = "scale-{n}"
[model]
n_layer = 1
n_head = 2
d_model = 16
seq_len = 16
vocab_size = 64
[data]
train = "{dir}/train.bin"
val = "{dir}/val.bin"
[train]
steps = 6
batch_size = 2
eval_every = 3
eval_batches = 1
log_every = 1
threads = 1
[optimizer]
name = "adamw"
warmup_steps = 1
[sweep]
method = "random"
samples = {n}
seed = 1
max_concurrent = 1
[sweep.parameters]
"optimizer.lr" = {{ log_uniform = [1e-4, 1e-2] }}
"""


def write_shard(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


class Server:
    def __init__(self, precon, work, token):
        self.precon, self.work, self.token = precon, work, token
        self.proc, self.url = None, None

    def start(self, timeout):
        log = open(os.path.join(self.work, "serve.log"), "ab")
        self.proc = subprocess.Popen(
            [self.precon, "serve", "--db", os.path.join(self.work, "precon.db"), "--port", "0", "--cpus", "1",
             "--slurm", "off", "--runs", os.path.join(self.work, "runs"), "--admin-token", self.token],
            stderr=subprocess.PIPE, stdout=log, cwd=self.work)
        deadline = time.monotonic() + timeout
        for line in self.proc.stderr:
            log.write(line)
            m = re.search(rb"precon serve: (http://\S+) \(database", line)
            if m:
                self.url = m.group(1).decode()
                break
            if time.monotonic() > deadline:
                break
        # Keep draining stderr so that the server never blocks on a full pipe.
        threading.Thread(target=lambda: [log.write(l) for l in self.proc.stderr], daemon=True).start()
        if self.url is None:
            raise RuntimeError("precon serve did not start; see " + log.name)

    def stop(self, timeout):
        """SIGTERM; seconds until it exited, or None when it had to be killed after `timeout`."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            return time.monotonic() - t0
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def request(url, method="GET", body=None, token=None, timeout=60.0):
    """(seconds, status) or (None, None) on a timeout."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            payload = r.read()
            return time.monotonic() - t0, r.status, payload
    except urllib.error.HTTPError as e:
        return time.monotonic() - t0, e.code, e.read()
    except (TimeoutError, OSError):
        return None, None, b""


class HealthProbe(threading.Thread):
    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.samples, self.failures, self.done = server, [], 0, threading.Event()
        self.paused = threading.Event()  # set while the bench itself stops or starts the server

    def run(self):
        while not self.done.is_set():
            url = self.server.url
            if not self.paused.is_set() and url and self.server.proc and self.server.proc.poll() is None:
                seconds, status, _ = request(url + "/healthz", timeout=5.0)
                if seconds is None or status != 200:
                    self.failures += 1
                    self.samples.append(5.0)
                else:
                    self.samples.append(seconds)
            self.done.wait(0.05)


def reap_trainers(work, timeout=30.0):
    """A stopped controller leaves its running trial running (a restart adopts it): wait for the
    trainers this bench started (their --run-dir is under `work`) to finish, kill what remains."""
    def ours():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"--run-dir" in argv and argv[argv.index(b"--run-dir") + 1:][:1] and \
                    argv[argv.index(b"--run-dir") + 1].startswith(work.encode() + b"/"):
                pids.append(int(pid))
        return pids
    deadline = time.monotonic() + timeout
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in ours():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def run_size(args, n):
    work = tempfile.mkdtemp(prefix="precon-scale-")
    tokens = [i % 64 for i in range(4096)]
    write_shard(os.path.join(work, "train.bin"), tokens)
    write_shard(os.path.join(work, "val.bin"), tokens[:1024])
    token = "b" * 32
    server = Server(args.precon, work, token)
    try:
        return measure(args, n, work, token, server)
    finally:
        if server.proc and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
        reap_trainers(work)
        shutil.rmtree(work, ignore_errors=True)


def measure(args, n, work, token, server):
    server.start(args.timeout)
    probe = HealthProbe(server)
    probe.start()
    row = {}

    def timed(name, *a, **kw):
        seconds, status, payload = request(*a, timeout=args.timeout, **kw)
        row[name] = seconds
        return status, payload

    status, payload = timed("submit", server.url + "/api/v1/experiments", "POST",
                            {"recipe": RECIPE.format(n=n, dir=work)}, token)
    if status is None:
        # Still submitting: the experiment appears once its transaction commits.
        deadline = time.monotonic() + 10 * args.timeout
        while time.monotonic() < deadline:
            _, _, listed = request(server.url + "/api/v1/experiments", timeout=args.timeout)
            if listed and json.loads(listed)["experiments"]:
                break
            time.sleep(1)
        status, payload = 201, json.dumps({"id": 1}).encode()
    if status != 201:
        raise RuntimeError("submit answered %s: %s" % (status, payload[:300]))
    exp = json.loads(payload)["id"]

    def reads(suffix):
        timed("list" + suffix, server.url + "/api/v1/experiments")
        timed("dash" + suffix, server.url + "/api/v1/dashboard/experiments")
        timed("best" + suffix, server.url + "/api/v1/experiments/%d/best" % exp)
        timed("metrics" + suffix, server.url + "/metrics")

    reads("")
    probe.paused.set()
    row["sigterm"] = server.stop(args.timeout)
    t0 = time.monotonic()
    server.url = None
    server.start(args.timeout)
    while request(server.url + "/healthz", timeout=args.timeout)[1] != 200:
        if time.monotonic() - t0 > args.timeout:
            break
    row["restart"] = time.monotonic() - t0
    probe.paused.clear()
    reads("2")
    status, _ = timed("cancel", server.url + "/api/v1/experiments/%d/cancel" % exp, "POST", {}, token)
    probe.paused.set()
    row["sigterm2"] = server.stop(args.timeout)
    probe.done.set()
    probe.join()
    row["health"] = (percentile(probe.samples, 0.5), percentile(probe.samples, 0.99), max(probe.samples or [0]),
                     probe.failures)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precon", required=True)
    ap.add_argument("--trials", type=int, nargs="+", default=[3000, 100000])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a request or a stop counts as hung")
    args = ap.parse_args()
    args.precon = os.path.abspath(args.precon)
    cols = ["submit", "list", "dash", "best", "metrics", "sigterm", "restart", "list2", "dash2", "best2", "metrics2",
            "cancel", "sigterm2"]

    def cell(v):
        return (">%.0f" % args.timeout) if v is None else "%.2f" % v

    print("seconds per step; healthz = p50/p99/max seconds (failed probes) over the whole run")
    print("%8s " % "trials" + " ".join("%8s" % c for c in cols) + "  healthz")
    for n in args.trials:
        row = run_size(args, n)
        if row is None:
            continue
        h = row["health"]
        print("%8d " % n + " ".join("%8s" % cell(row[c]) for c in cols) +
              "  %.3f/%.3f/%.2f (%d)" % h, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
