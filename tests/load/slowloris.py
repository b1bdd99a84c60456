"""The slow-loris case of load_test.py (--slowloris N): N connections from each of --slowloris-addresses
loopback addresses (127.0.0.10, 127.0.0.11, ...; Linux routes all of 127/8 to lo) each send a
request's header one byte every --slowloris-interval seconds and never finish it, reconnecting at
once whenever the controller closes them, while --workers simulated workers report and a probe
asks /healthz every 50 ms on a fresh connection from 127.0.0.1.

A worker here behaves as precon-train's reporter: a batch that is not acknowledged (an error
status, a refused or reset connection, a timeout) is sent again after a capped exponential backoff,
until it is. When the time is up each worker finishes the batch it holds (for at most 30 s).
Prints the probes' statuses and latency, the reports' latency and retries, the attackers'
connections, and the points acknowledged, stored and lost (sent but not stored). With --check it
exits 1 unless every probe is answered 200 with a p99 under 100 ms and no point is lost.
"""
import errno
import http.client
import json
import os
import random
import resource
import selectors
import shutil
import signal
import socket
import sqlite3
import sys
import threading
import time
import urllib.parse

import load_test as lt

# The header a slow client sends, a byte at a time: a request line and a header field whose
# value never ends (8 KB of it would take hours at one byte every 2 s).
SLOW_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 65536


class SlowLoris(threading.Thread):
    """Holds `per_address` slow connections from each source address, from one thread."""

    def __init__(self, host, port, sources, per_address, interval):
        super().__init__(daemon=True)
        self.target, self.sources, self.per_address, self.interval = (host, port), sources, per_address, interval
        self.stop = threading.Event()
        self.opened = self.closed_by_server = self.answered_408 = self.answered_503 = self.connect_failures = 0
        self.live_samples = []  # connections open at each second

    def open(self, selector, source, now):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((source, 0))
            rc = s.connect_ex(self.target)
        except OSError:
            rc = -1
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            self.connect_failures += 1
            return
        self.opened += 1
        # source, bytes sent, when the next byte goes (spread over the first interval)
        selector.register(s, selectors.EVENT_READ, [source, 0, now + random.uniform(0, self.interval)])

    def run(self):
        selector = selectors.DefaultSelector()
        now = time.monotonic()
        for source in self.sources:
            for _ in range(self.per_address):
                self.open(selector, source, now)
        next_sample = now + 1
        while not self.stop.is_set():
            now = time.monotonic()
            for key, _ in selector.select(timeout=0.05):
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 408"):
                    self.answered_408 += 1
                elif data.startswith(b"HTTP/1.1 503"):
                    self.answered_503 += 1
                if data:
                    continue  # the close follows
                self.closed_by_server += 1
                source = key.data[0]
                selector.unregister(key.fileobj)
                key.fileobj.close()
                self.open(selector, source, now)
            for key in list(selector.get_map().values()):
                state = key.data
                if state[2] > now:
                    continue
                state[2] = now + self.interval
                try:
                    state[1] += key.fileobj.send(SLOW_REQUEST[state[1]:state[1] + 1])
                except OSError:
                    pass  # not connected yet, or closed: the read side sees it
            if now >= next_sample:
                self.live_samples.append(len(selector.get_map()))
                next_sample += 1
        for key in list(selector.get_map().values()):
            key.fileobj.close()


class RetryingWorker(threading.Thread):
    """A simulated worker that resends each batch until it is acknowledged, as the reporter does."""

    def __init__(self, trial, token, url, stop, pace):
        super().__init__(daemon=True)
        self.trial, self.token, self.stop, self.pace = trial, token, stop, pace
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.latencies, self.failures, self.sent, self.acked, self.step = [], {}, 0, 0, 0
        self.unacknowledged = 0  # points of the batch still held when the worker gave up

    def run(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + self.token}
        while not self.stop.is_set():
            records = [{"step": self.step + k, "time": time.time(),
                        "values": {m: 1.0 + (self.step + k) * 1e-3 for m in lt.METRICS}}
                       for k in range(lt.RECORDS_PER_BATCH)]
            body = json.dumps({"trial": self.trial, "records": records})
            points = len(records) * len(lt.METRICS)
            self.sent += points
            backoff, give_up = 0.2, None
            while True:
                t0 = time.monotonic()
                try:
                    conn.request("POST", self.path, body, headers)
                    r = conn.getresponse()
                    payload = r.read()
                    ok = r.status == 200 and json.loads(payload).get("ok") is True
                    why = "HTTP %d" % r.status
                    if r.getheader("Connection", "").lower() == "close":
                        conn.close()
                except (OSError, http.client.HTTPException, ValueError) as e:
                    ok, why = False, type(e).__name__
                    conn.close()
                self.latencies.append(time.monotonic() - t0)
                if ok:
                    self.acked += points
                    break
                self.failures[why] = self.failures.get(why, 0) + 1
                if self.stop.is_set():
                    give_up = give_up or time.monotonic() + 30
                    if time.monotonic() > give_up:
                        self.unacknowledged += points
                        break
                time.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, 2.0)
            self.step += lt.RECORDS_PER_BATCH
            self.stop.wait(self.pace)
        conn.close()


def probe(host, port, stop, results, store=False):
    """GET /healthz every 50 ms, each on a new connection: (status or error, seconds, when, and with
    `store` its "store"."blocked", else None)."""
    while not stop.is_set():
        t0 = time.monotonic()
        blocked = None
        try:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            body = r.read()
            status = r.status
            conn.close()
            if store and status == 200:
                blocked = json.loads(body).get("store", {}).get("blocked")
        except (OSError, http.client.HTTPException, ValueError) as e:
            status = type(e).__name__
        results.append((status, time.monotonic() - t0, t0, blocked))
        stop.wait(0.05)


def more_files():
    """Raises this process's open-file limit (and so its children's) to what the case needs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 16384 if hard == resource.RLIM_INFINITY else min(hard, 16384)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run(args, work, bindir):
    limit = more_files()
    needed = args.slowloris * args.slowloris_addresses + args.workers + 256
    if limit < needed:
        print("load_test: the open-file limit is %d, the slow-loris case needs %d" % (limit, needed), file=sys.stderr)
        return 1
    with open(os.path.join(bindir, "precon-train"), "w") as f:
        f.write(lt.SHIM)
    os.chmod(os.path.join(bindir, "precon-train"), 0o755)
    tokens = [i % 64 for i in range(4096)]
    lt.write_shard(os.path.join(work, "train.bin"), tokens)
    lt.write_shard(os.path.join(work, "val.bin"), tokens[:1024])
    admin = "c" * 32
    db = os.path.join(work, "precon.db")
    server, u, log = lt.start_serve(bindir, work, db, admin, ["--cpus", str(args.workers)])
    attack = None
    try:
        def call(method, path, body=None):
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            conn.request(method, path, None if body is None else json.dumps(body),
                         {"Content-Type": "application/json", "Authorization": "Bearer " + admin})
            r = conn.getresponse()
            payload = r.read()
            conn.close()
            return r.status, json.loads(payload) if payload else None

        status, exp = call("POST", "/api/v1/experiments",
                           {"recipe": lt.RECIPE.format(dir=work, trials=args.workers, workers=args.workers)})
        if status != 201:
            raise RuntimeError("submit answered %d: %s" % (status, exp))
        ready = []

        def all_ready():
            ready[:] = [os.path.join(r, "worker.ready") for r, _, files in os.walk(os.path.join(work, "runs"))
                        if "worker.ready" in files]
            return len(ready) >= args.workers

        lt.wait_for(all_ready, 120, "%d stand-in workers to start" % args.workers)
        sources = ["127.0.0.%d" % (10 + i) for i in range(args.slowloris_addresses)]
        attack = SlowLoris(u.hostname, u.port, sources, args.slowloris, args.slowloris_interval)
        attack.start()
        time.sleep(3)  # the table fills before the workers connect
        stop = threading.Event()
        workers = []
        for path in ready[:args.workers]:
            with open(path) as f:
                trial, token, report_url = f.read().split()
            workers.append(RetryingWorker(int(trial), token, report_url, stop, pace=0.1))
        probes = []
        prober = threading.Thread(target=probe, args=(u.hostname, u.port, stop, probes), daemon=True)
        t_start = time.monotonic()
        for w in workers:
            w.start()
        prober.start()
        stop.wait(args.duration)
        stop.set()
        prober.join(30)
        for w in workers:
            w.join(60)
        attack.stop.set()
        attack.join(30)
        status, _ = call("POST", "/api/v1/experiments/%d/cancel" % exp["id"])
        lt.release_all(work)
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        server = None

        with sqlite3.connect(db) as c:
            stored = dict(c.execute("SELECT trial_id, count(*) FROM metrics GROUP BY trial_id").fetchall())
        sent = sum(w.sent for w in workers)
        stored_total = sum(stored.get(w.trial, 0) for w in workers)
        lost = sum(max(0, w.sent - stored.get(w.trial, 0)) for w in workers)
        acked = sum(w.acked for w in workers)
        lat = [p[1] for p in probes]
        statuses = {}
        for p in probes:
            statuses[p[0]] = statuses.get(p[0], 0) + 1
        bad = [p for p in probes if p[0] != 200]
        bad_span = (bad[-1][2] - bad[0][2]) if bad else 0.0
        report_lat = [x for w in workers for x in w.latencies]
        failures = {}
        for w in workers:
            for k, n in w.failures.items():
                failures[k] = failures.get(k, 0) + n
        print("slow-loris: %d connections from each of %s, one byte every %.1f s; %d workers, %.0f s" % (
            args.slowloris, ", ".join(sources), args.slowloris_interval, args.workers, args.duration))
        print("attackers: %d connections opened, %d closed by the controller (%d answered 408, %d answered 503), "
              "%d connects failed; open per second: %s" % (
                  attack.opened, attack.closed_by_server, attack.answered_408, attack.answered_503,
                  attack.connect_failures, ", ".join(str(n) for n in attack.live_samples[::5])))
        print("/healthz: %d probes, by status %s; p50 %.1f ms, p99 %.1f ms, max %.1f ms; not 200 for %.1f s" % (
            len(probes), statuses, lt.percentile(lat, 0.5) * 1e3, lt.percentile(lat, 0.99) * 1e3,
            max(lat or [0]) * 1e3, bad_span))
        print("reports: %d requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms; retried: %s" % (
            len(report_lat), lt.percentile(report_lat, 0.5) * 1e3, lt.percentile(report_lat, 0.99) * 1e3,
            max(report_lat or [0]) * 1e3, failures or "none"))
        print("points: sent %d, acknowledged %d, stored %d, lost %d (%.1f s from the first probe to the end)" % (
            sent, acked, stored_total, lost, time.monotonic() - t_start))
        if args.check:
            problems = []
            if bad:
                problems.append("%d of %d /healthz probes not answered 200" % (len(bad), len(probes)))
            if not lt.percentile(lat, 0.99) < 0.1:
                problems.append("/healthz p99 %.1f ms" % (lt.percentile(lat, 0.99) * 1e3))
            if lost or stored_total != sent:
                problems.append("%d points lost (sent %d, stored %d)" % (lost, sent, stored_total))
            if problems:
                print("load_test: FAILED: " + "; ".join(problems), file=sys.stderr)
                return 1
        return 0
    finally:
        if attack is not None:
            attack.stop.set()
        if server is not None:
            server.kill()
            server.wait()
        lt.release_all(work)
