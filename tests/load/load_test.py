#!/usr/bin/python3
"""Load on a real `precon serve` holding --trials trials: reads from wrk, a report flood from
--workers simulated workers, each reporting for its own trial with that trial's own token.

    tests/load/load_test.py --precon build/orchestrator/precon [--duration 600] [--check]

The controller launches its trials as it always does; its trainer is a stand-in (precon-train
beside a copy of the precon program, see SHIM) that hands the flood its trial's token and report
URL and waits until it is released. The flood posts batches of steps for several metrics as fast
as the controller answers; wrk meanwhile reads the API (health, lists, the dashboard, a trial's
series, /metrics). At the end every stand-in is released, the experiment is cancelled, the server
is stopped with SIGTERM, and the points in the database are counted against those the controller
acknowledged. The controller's RSS is sampled every second; it is bounded when the lowest sample of
the last quarter of the run after the warm-up is within 10% of the highest of the first quarter
(samples swing by about 15% a second under the report flood; a leak raises the floor).

Prints one table: per side the requests, p50/p99 latency and errors; points acknowledged, stored
and lost; RSS after the warm-up, at the end and its maximum. With --check it exits 1 unless there
are zero errors, zero lost points and the RSS stays bounded.

    tests/load/load_test.py --precon build/orchestrator/precon --burst-trials 100000 [--check]

is another case: a burst of the heavy reads (an experiment's trial list, its dashboard table, its
`best` ranking, the experiments overview) from --burst-clients clients at once for --duration
seconds against one experiment of --burst-trials ended trials (written into the database before
the controller starts), while a probe asks /healthz and /metrics every 50 ms. With --check it
exits 1 unless every probe is answered within 100 ms, every heavy read is answered 200 or
503 busy, and the RSS a few seconds after the burst is within 20% of the RSS after one warm-up
round of those reads.

    tests/load/load_test.py --precon build/orchestrator/precon --slowloris 256 --workers 16 --duration 20 [--check]

is the slow-loris case (slowloris.py): 256 connections from each of 4 loopback addresses send a
request's header a byte every 2 s while 16 workers report and a probe asks /healthz every 50 ms.
With --check it exits 1 unless every probe is answered 200 with a p99 under 100 ms and every
point sent is stored.

    tests/load/load_test.py --precon build/orchestrator/precon --store-lock 25 --workers 8 [--check]

is the locked-database case (store_lock.py): the sqlite3 program holds the database in BEGIN
EXCLUSIVE for 25 s while 8 workers report and /healthz is probed every 50 ms.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

# The stand-in trainer. argv: --config C --run-dir D --report-url U --trial-id N. It writes its
# trial id, token and report URL to D/worker.ready and blocks on the FIFO D/release.
SHIM = r"""#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --run-dir) dir=$2; shift ;;
    --report-url) url=$2; shift ;;
    --trial-id) id=$2; shift ;;
  esac
  shift
done
mkfifo "$dir/release" || exit 3
printf '%s %s %s\n' "$id" "$PRECON_TRIAL_TOKEN" "$url" > "$dir/worker.tmp"
mv "$dir/worker.tmp" "$dir/worker.ready"
read line < "$dir/release"
exit 0
"""

RECIPE = """
[experiment]
name = "load"
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
steps = 1000000
batch_size = 2
threads = 1
[optimizer]
name = "adamw"
[sweep]
method = "random"
samples = {trials}
seed = 1
max_concurrent = {workers}
[sweep.parameters]
"optimizer.lr" = {{ log_uniform = [1e-4, 1e-2] }}
"""

# wrk's script: a round of read routes per connection, and a JSON summary at the end.
WRK_LUA = r"""
local paths = {PATHS}
local i = 0
local threads = {}
setup = function(thread)
  table.insert(threads, thread)
end
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1])
end
-- Per thread: the answers of status 400 and above, by status.
failed = {}
response = function(status, headers, body)
  if status >= 400 then
    local key = tostring(status)
    failed[key] = (failed[key] or 0) + 1
  end
end
done = function(summary, latency, requests)
  local e = summary.errors
  local bad = {}
  for _, t in ipairs(threads) do
    for k, n in pairs(t:get("failed") or {}) do
      table.insert(bad, string.format('"%s": %d', k, n))
    end
  end
  io.write(string.format('WRK {"requests": %d, "p50": %f, "p99": %f, "max": %f, "connect": %d, "read": %d, ' ..
                         '"write": %d, "status": %d, "timeout": %d, "failed": {%s}}\n',
                         summary.requests, latency:percentile(50) / 1e6, latency:percentile(99) / 1e6,
                         latency.max / 1e6, e.connect, e.read, e.write, e.status, e.timeout, table.concat(bad, ", ")))
end
"""

METRICS = ("train_loss", "lr", "tokens_per_second")
RECORDS_PER_BATCH = 8


def write_shard(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.1)


def release_all(work):
    """Releases every stand-in blocked on its FIFO (one that has gone has no reader: ENXIO)."""
    for root, _, files in os.walk(os.path.join(work, "runs")):
        if "release" in files:
            try:
                fd = os.open(os.path.join(root, "release"), os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.write(fd, b"go\n")
            os.close(fd)


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class Worker(threading.Thread):
    """One simulated worker: its trial, its token, one keep-alive connection."""

    def __init__(self, trial, token, url, stop):
        super().__init__(daemon=True)
        self.trial, self.token, self.stop = trial, token, stop
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.latencies, self.errors, self.acked, self.step = [], [], 0, 0

    def run(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + self.token}
        while not self.stop.is_set():
            records = []
            for k in range(RECORDS_PER_BATCH):
                s = self.step + k
                records.append({"step": s, "time": time.time(),
                                "values": {"train_loss": 4.0 / (1 + s * 1e-3), "lr": 1e-3, "tokens_per_second": 1e4 + s}})
            body = json.dumps({"trial": self.trial, "records": records})
            t0 = time.monotonic()
            try:
                conn.request("POST", self.path, body, headers)
                r = conn.getresponse()
                payload = r.read()
                ok = r.status == 200 and json.loads(payload).get("ok") is True
                if not ok:
                    self.errors.append("HTTP %d %s" % (r.status, payload[:200]))
            except (OSError, http.client.HTTPException, ValueError) as e:
                ok = False
                self.errors.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.latencies.append(time.monotonic() - t0)
            if ok:
                self.acked += len(records) * len(METRICS)
                self.step += RECORDS_PER_BATCH
        conn.close()


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()

    def run(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    kb = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
                self.samples.append((time.monotonic() - t0, kb / 1024.0))
            except (OSError, AttributeError):
                pass
            self.stop.wait(1.0)


BURST_CONFIG = """[model]
n_layer = 2
n_head = 4
d_model = 64
seq_len = 128
vocab_size = 50304
[data]
train = "/data/corpus/train_{i}.bin"
val = "/data/corpus/val.bin"
[train]
steps = 1000
batch_size = 32
seed = {i}
[optimizer]
name = "muon"
lr = {lr}
""" + "\n".join("# padding line %d of a resolved config that lists every key" % k for k in range(24))


def start_serve(bindir, work, db, admin, extra):
    log = open(os.path.join(work, "serve.log"), "ab")
    server = subprocess.Popen([os.path.join(bindir, "precon"), "serve", "--db", db, "--port", "0", "--slurm", "off",
                               "--runs", os.path.join(work, "runs"), "--admin-token", admin] + extra,
                              stderr=subprocess.PIPE, stdout=log, cwd=work)
    for line in server.stderr:
        log.write(line)
        m = re.search(rb"precon serve: (http://\S+) \(database", line)
        if m:
            threading.Thread(target=lambda: [log.write(l) for l in server.stderr], daemon=True).start()
            return server, urllib.parse.urlsplit(m.group(1).decode()), log
    raise RuntimeError("precon serve did not start; see " + log.name)


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024.0


def fill_big_experiment(db, trials, runs):
    """One completed experiment of `trials` ended trials, each with val_loss, step_seconds and flops
    at two steps, written straight into a database the controller created."""
    now = time.time()
    with sqlite3.connect(db) as c:
        cur = c.execute(
            "INSERT INTO experiments (name, description, recipe_path, recipe_text, overrides_json, state, "
            "objective_metric, objective_mode, max_concurrent, max_attempts, early_stop_json, run_root, created_at, "
            "ended_at) VALUES ('burst', '', '/recipes/burst.toml', ?, '[]', 'completed', 'val_loss', 'min', 64, 1, "
            "'{}', ?, ?, ?)", (BURST_CONFIG.format(i=0, lr=0.01), runs, now - 3600, now))
        exp = cur.lastrowid
        rows = []
        for i in range(trials):
            lr = 1e-4 * (1 + i % 997)
            rows.append((exp, i, json.dumps({"optimizer.lr": lr, "train.seed": i}), BURST_CONFIG.format(i=i, lr=lr),
                         "completed", "", "", 1, 1000, now - 3600, now - 3500, now - 100))
        c.executemany("INSERT INTO trials (experiment_id, idx, params_json, config_toml, state, reason, run_dir, "
                      "attempts, last_step, created_at, started_at, ended_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        c.execute("UPDATE trials SET run_dir = ? || '/trial-' || id WHERE experiment_id = ?", (runs, exp))
        names = {}
        for name in ("val_loss", "step_seconds", "flops"):
            c.execute("INSERT OR IGNORE INTO metric_names (name) VALUES (?)", (name,))
            names[name] = c.execute("SELECT id FROM metric_names WHERE name = ?", (name,)).fetchone()[0]
        ids = [r[0] for r in c.execute("SELECT id FROM trials WHERE experiment_id = ? ORDER BY idx", (exp,))]

        def points():
            for k, tid in enumerate(ids):
                for step in (500, 1000):
                    yield tid, names["val_loss"], step, 3.0 + (k * 7919 % 1000) / 1000.0 - step / 1000.0, now - 200
                    yield tid, names["step_seconds"], step, 0.1 + (k % 13) / 100.0, now - 200
                    yield tid, names["flops"], step, 1e12 * step, now - 200
        c.executemany("INSERT INTO metrics (trial_id, name_id, step, value, time) VALUES (?,?,?,?,?)", points())
    return exp


def burst(args, work, bindir):
    """The heavy-reads burst (see the module's docstring); returns the exit status."""
    admin = "b" * 32
    db = os.path.join(work, "precon.db")
    runs = os.path.join(work, "runs")
    server, u, log = start_serve(bindir, work, db, admin, [])  # creates the database at the current schema
    server.send_signal(signal.SIGTERM)
    server.wait(60)
    t0 = time.monotonic()
    exp = fill_big_experiment(db, args.burst_trials, runs)
    filled = time.monotonic() - t0
    server, u, log = start_serve(bindir, work, db, admin, [])
    try:
        heavy = ["/api/v1/experiments/%d/trials" % exp, "/api/v1/dashboard/experiments/%d" % exp,
                 "/api/v1/experiments/%d/best" % exp, "/api/v1/dashboard/experiments"]

        def get(path, timeout=120):
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
            t = time.monotonic()
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            conn.close()
            return r.status, len(body), time.monotonic() - t

        rss_start = rss_mib(server.pid)
        print("burst: %d trials written in %.1f s; controller RSS %.1f MiB at start" % (args.burst_trials, filled,
                                                                                         rss_start))
        print("%-44s %7s %10s %9s" % ("warm-up read", "status", "bytes", "seconds"))
        for path in heavy:
            status, size, seconds = get(path)
            print("%-44s %7d %10d %9.3f" % (path, status, size, seconds))
            if status != 200:
                raise RuntimeError("%s answered %d" % (path, status))
        time.sleep(1)
        rss_base = rss_mib(server.pid)
        stop = threading.Event()
        answers, failures, probes, peak = {}, [], [], [rss_base]
        lock = threading.Lock()

        def client(k):
            i = k
            while not stop.is_set():
                path = heavy[i % len(heavy)]
                i += 1
                try:
                    status, _, _ = get(path)
                except (OSError, http.client.HTTPException) as e:
                    status = repr(e)
                with lock:
                    answers[status] = answers.get(status, 0) + 1
                    if status not in (200, 503):
                        failures.append("%s: %s" % (path, status))

        def probe():
            i = 0
            while not stop.is_set():
                path = ("/healthz", "/metrics")[i % 2]
                i += 1
                try:
                    status, _, seconds = get(path, timeout=10)
                except (OSError, http.client.HTTPException) as e:
                    status, seconds = repr(e), 10.0
                probes.append((path, status, seconds))
                peak[0] = max(peak[0], rss_mib(server.pid))
                stop.wait(0.05)

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.burst_clients)]
        threads.append(threading.Thread(target=probe, daemon=True))
        for t in threads:
            t.start()
        time.sleep(args.duration)
        stop.set()
        for t in threads:
            t.join(180)
        time.sleep(3)
        rss_after = rss_mib(server.pid)
        slow = [p for p in probes if p[1] != 200 or p[2] >= 0.1]
        for path in ("/healthz", "/metrics"):
            lat = [p[2] for p in probes if p[0] == path]
            print("probe %-8s %4d answers, p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
                path, len(lat), percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3, max(lat or [0]) * 1e3))
        print("heavy reads by status: %s" % ", ".join("%s: %d" % kv for kv in sorted(answers.items(), key=str)))
        growth = rss_after / rss_base - 1
        print("controller RSS: %.1f MiB after the warm-up, peak %.1f MiB, %.1f MiB 3 s after the burst (%+.1f%%)" % (
            rss_base, peak[0], rss_after, growth * 100))
        if args.check:
            problems = []
            if slow:
                problems.append("%d of %d probes slower than 100 ms or not 200: %s" % (len(slow), len(probes), slow[:5]))
            if failures:
                problems.append("heavy reads answered neither 200 nor 503: %s" % failures[:5])
            if not answers.get(200):
                problems.append("no heavy read was answered")
            if not growth <= 0.20:
                problems.append("RSS %.1f MiB after the burst, %+.1f%% from %.1f MiB" % (rss_after, growth * 100, rss_base))
            if problems:
                print("load_test: FAILED: " + "; ".join(problems), file=sys.stderr)
                return 1
        return 0
    finally:
        server.kill()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precon", required=True)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60, help="seconds of load")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds before the RSS baseline (default: 60, or a third of a shorter run)")
    ap.add_argument("--cache-points", type=int, default=200000,
                    help="the controller's metric cache budget (--metric-cache-points)")
    ap.add_argument("--check", action="store_true", help="exit 1 on errors, lost points or RSS growth over 10%%")
    ap.add_argument("--burst-trials", type=int, default=0,
                    help="run the heavy-reads burst against one experiment of this many trials instead")
    ap.add_argument("--burst-clients", type=int, default=8, help="clients of the heavy-reads burst")
    ap.add_argument("--slowloris", type=int, default=0,
                    help="run the slow-loris case instead, with this many slow connections per address")
    ap.add_argument("--slowloris-addresses", type=int, default=4, help="loopback addresses of the slow clients")
    ap.add_argument("--slowloris-interval", type=float, default=2.0, help="seconds between a slow client's bytes")
    ap.add_argument("--store-lock", type=float, default=0,
                    help="run the locked-database case instead: sqlite3 holds BEGIN EXCLUSIVE this many seconds")
    args = ap.parse_args()
    if args.store_lock:
        import store_lock
        work = tempfile.mkdtemp(prefix="precon-store-lock-")
        try:
            bindir = os.path.join(work, "bin")
            os.makedirs(bindir)
            shutil.copy2(os.path.abspath(args.precon), os.path.join(bindir, "precon"))
            return store_lock.run(args, work, bindir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.slowloris:
        import slowloris
        work = tempfile.mkdtemp(prefix="precon-slowloris-")
        try:
            bindir = os.path.join(work, "bin")
            os.makedirs(bindir)
            shutil.copy2(os.path.abspath(args.precon), os.path.join(bindir, "precon"))
            return slowloris.run(args, work, bindir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.burst_trials:
        work = tempfile.mkdtemp(prefix="precon-burst-")
        try:
            bindir = os.path.join(work, "bin")
            os.makedirs(bindir)
            shutil.copy2(os.path.abspath(args.precon), os.path.join(bindir, "precon"))
            return burst(args, work, bindir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    warmup = args.warmup if args.warmup is not None else min(60.0, args.duration / 3)
    if not shutil.which(args.wrk):
        print("load_test: wrk is missing (deploy/install-deps.sh installs it)", file=sys.stderr)
        return 1

    work = tempfile.mkdtemp(prefix="precon-load-")
    server = None
    try:
        bindir = os.path.join(work, "bin")
        os.makedirs(bindir)
        shutil.copy2(os.path.abspath(args.precon), os.path.join(bindir, "precon"))
        with open(os.path.join(bindir, "precon-train"), "w") as f:
            f.write(SHIM)
        os.chmod(os.path.join(bindir, "precon-train"), 0o755)
        tokens = [i % 64 for i in range(4096)]
        write_shard(os.path.join(work, "train.bin"), tokens)
        write_shard(os.path.join(work, "val.bin"), tokens[:1024])
        admin = "a" * 32
        db = os.path.join(work, "precon.db")
        log = open(os.path.join(work, "serve.log"), "wb")
        server = subprocess.Popen(
            [os.path.join(bindir, "precon"), "serve", "--db", db, "--port", "0", "--cpus", str(args.workers),
             "--slurm", "off", "--runs", os.path.join(work, "runs"), "--admin-token", admin,
             "--metric-cache-points", str(args.cache_points)],
            stderr=subprocess.PIPE, stdout=log, cwd=work)
        url = None
        for line in server.stderr:
            log.write(line)
            m = re.search(rb"precon serve: (http://\S+) \(database", line)
            if m:
                url = m.group(1).decode()
                break
        if url is None:
            raise RuntimeError("precon serve did not start; see " + log.name)
        threading.Thread(target=lambda: [log.write(l) for l in server.stderr], daemon=True).start()
        u = urllib.parse.urlsplit(url)

        def call(method, path, body=None, token=None):
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = "Bearer " + token
            conn.request(method, path, None if body is None else json.dumps(body), headers)
            r = conn.getresponse()
            payload = r.read()
            conn.close()
            return r.status, json.loads(payload) if payload else None

        status, exp = call("POST", "/api/v1/experiments",
                           {"recipe": RECIPE.format(dir=work, trials=args.trials, workers=args.workers)}, admin)
        if status != 201:
            raise RuntimeError("submit answered %d: %s" % (status, exp))
        exp_id = exp["id"]
        runs = None

        def ready():
            nonlocal runs
            found = []
            for root, _, files in os.walk(os.path.join(work, "runs")):
                if "worker.ready" in files:
                    found.append(os.path.join(root, "worker.ready"))
            runs = found
            return len(found) >= args.workers

        wait_for(ready, 120, "%d stand-in workers to start" % args.workers)
        stop = threading.Event()
        workers = []
        for path in runs[:args.workers]:
            with open(path) as f:
                trial, token, report_url = f.read().split()
            workers.append(Worker(int(trial), token, report_url, stop))
        first_trial = min(w.trial for w in workers)
        paths = ["/healthz", "/api/v1/experiments", "/api/v1/dashboard/experiments",
                 "/api/v1/experiments/%d/trials" % exp_id, "/api/v1/trials/%d/metrics?max_points=200" % first_trial,
                 "/api/v1/dashboard/experiments/%d/curves?points=200" % exp_id, "/metrics"]
        lua = os.path.join(work, "reads.lua")
        with open(lua, "w") as f:
            f.write(WRK_LUA.replace("{PATHS}", "{" + ", ".join('"%s"' % p for p in paths) + "}"))
        rss = RssSampler(server.pid)
        rss.start()
        for w in workers:
            w.start()
        wrk = subprocess.run([args.wrk, "-t2", "-c16", "-d%ds" % int(args.duration), "--timeout", "10s", "-s", lua, url],
                             capture_output=True, text=True)
        stop.set()
        for w in workers:
            w.join()
        rss.stop.set()
        rss.join()
        m = re.search(r"^WRK (\{.*\})$", wrk.stdout, re.M)
        if wrk.returncode != 0 or not m:
            raise RuntimeError("wrk failed: %s %s" % (wrk.stdout, wrk.stderr))
        reads = json.loads(m.group(1))
        read_errors = sum(reads[k] for k in ("connect", "read", "write", "status", "timeout"))

        # Stand-ins are released into a cancelled experiment: nothing new starts, every trial ends.
        status, _ = call("POST", "/api/v1/experiments/%d/cancel" % exp_id, {}, admin)
        if status != 200:
            raise RuntimeError("cancel answered %d" % status)
        release_all(work)
        wait_for(lambda: call("GET", "/api/v1/experiments")[1]["experiments"][0]["state"] != "running", 120,
                 "the experiment to end")
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        server = None

        acked = {w.trial: w.acked for w in workers}
        with sqlite3.connect(db) as c:
            stored = dict(c.execute("SELECT trial_id, count(*) FROM metrics GROUP BY trial_id").fetchall())
        lost = sum(max(0, n - stored.get(t, 0)) for t, n in acked.items())
        write_lat = [x for w in workers for x in w.latencies]
        write_errors = [e for w in workers for e in w.errors]
        # Bounded: no growth from the window after the warm-up to the end of the run (medians of
        # the first and last quarter after it, so one busy second does not decide); the maximum is
        # printed beside it.
        base = [kb for t, kb in rss.samples if t >= warmup]
        quarter = max(1, len(base) // 4)
        rss_base = percentile(base[:quarter], 0.5)
        rss_end = percentile(base[-quarter:], 0.5)
        rss_max = max(base) if base else float("nan")
        growth = rss_end / rss_base - 1 if base else float("nan")
        # The check: the floor of the last quarter against the ceiling of the first. The resident set
        # swings by ±15% from one second to the next under 64 reporting workers (allocator arenas,
        # connection buffers), so medians a few samples apart flag noise; a leak raises the floor.
        floor_growth = min(base[-quarter:]) / max(base[:quarter]) - 1 if base else float("nan")

        print("load: %d trials, %d workers, %.0f s (RSS baseline at %.0f s)" % (args.trials, args.workers,
                                                                              args.duration, warmup))
        print("%-7s %9s %9s %9s %9s %7s" % ("side", "requests", "p50 ms", "p99 ms", "max ms", "errors"))
        print("%-7s %9d %9.2f %9.2f %9.2f %7d" % ("reads", reads["requests"], reads["p50"] * 1e3, reads["p99"] * 1e3,
                                                 reads["max"] * 1e3, read_errors))
        print("%-7s %9d %9.2f %9.2f %9.2f %7d" % ("reports", len(write_lat), percentile(write_lat, 0.5) * 1e3,
                                                 percentile(write_lat, 0.99) * 1e3, max(write_lat or [0]) * 1e3,
                                                 len(write_errors)))
        print("points: acknowledged %d, stored %d, lost %d" % (sum(acked.values()), sum(stored.get(t, 0) for t in acked),
                                                              lost))
        print("controller RSS: %.1f MiB after the warm-up, %.1f MiB at the end (%+.1f%%), max %.1f MiB (%+.1f%%); "
              "at start %.1f MiB" % (rss_base, rss_end, growth * 100, rss_max, (rss_max / rss_base - 1) * 100,
                                     rss.samples[0][1] if rss.samples else float("nan")))
        if rss.samples:
            step = max(1, len(rss.samples) // 10)
            print("RSS MiB over time: " + ", ".join("%.0fs %.1f" % (t, kb) for t, kb in rss.samples[::step]))
        for e in write_errors[:5]:
            print("  report error: " + e)
        if args.check:
            problems = []
            if read_errors or write_errors:
                problems.append("%d read and %d report errors (reads: %s)" % (
                    read_errors, len(write_errors),
                    ", ".join("%s %d" % (k, reads[k]) for k in ("connect", "read", "write", "status", "timeout"))))
            if lost:
                problems.append("%d points lost" % lost)
            if not floor_growth <= 0.10:
                problems.append("RSS grew %.1f%% from the highest sample of the first quarter after the warm-up "
                                "to the lowest of the last" % (floor_growth * 100))
            if problems:
                if reads.get("failed"):
                    problems.append("answers of 400 and above (status: count): %s" % reads["failed"])
                log.flush()
                with open(log.name, "rb") as f:
                    tail = f.read().decode(errors="replace").splitlines()[-30:]
                print("load_test: FAILED: " + "; ".join(problems) + "\nthe controller's last log lines:\n" +
                      "\n".join(tail), file=sys.stderr)
                return 1
        return 0
    finally:
        if server is not None:
            server.kill()
            server.wait()
        release_all(work)  # none outlives the test
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
