"""The locked-database case of load_test.py (--store-lock SECONDS): another process holds the
controller's database in BEGIN EXCLUSIVE (the sqlite3 program) for SECONDS while --workers simulated
workers report (resending what is refused, as precon-train's reporter does) and a probe asks /healthz
every 50 ms on a fresh connection. Prints the probes during the lock, the reports' latency and
refusals, and the points sent and stored. With --check it exits 1 unless every probe during the lock
is answered 200 with a p99 under 100 ms, saying the store is blocked from a second into the lock on,
and every point sent is stored.
"""
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import load_test as lt
import slowloris as sl


def run(args, work, bindir):
    with open(os.path.join(bindir, "precon-train"), "w") as f:
        f.write(lt.SHIM)
    os.chmod(os.path.join(bindir, "precon-train"), 0o755)
    tokens = [i % 64 for i in range(4096)]
    lt.write_shard(os.path.join(work, "train.bin"), tokens)
    lt.write_shard(os.path.join(work, "val.bin"), tokens[:1024])
    admin = "e" * 32
    db = os.path.join(work, "precon.db")
    server, u, log = lt.start_serve(bindir, work, db, admin, ["--cpus", str(args.workers)])
    locker = None
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        conn.request("POST", "/api/v1/experiments",
                     json.dumps({"recipe": lt.RECIPE.format(dir=work, trials=args.workers, workers=args.workers)}),
                     {"Authorization": "Bearer " + admin, "Content-Type": "application/json"})
        r = conn.getresponse()
        exp = json.loads(r.read())
        conn.close()
        if r.status != 201:
            raise RuntimeError("submit answered %d: %s" % (r.status, exp))
        ready = []

        def all_ready():
            ready[:] = [os.path.join(d, "worker.ready") for d, _, files in os.walk(os.path.join(work, "runs"))
                        if "worker.ready" in files]
            return len(ready) >= args.workers

        lt.wait_for(all_ready, 120, "%d stand-in workers to start" % args.workers)
        stop = threading.Event()
        workers = []
        for path in ready[:args.workers]:
            with open(path) as f:
                trial, token, report_url = f.read().split()
            workers.append(sl.RetryingWorker(int(trial), token, report_url, stop, pace=0.1))
        probes = []
        prober = threading.Thread(target=sl.probe, args=(u.hostname, u.port, stop, probes, True), daemon=True)
        for w in workers:
            w.start()
        prober.start()
        time.sleep(2)
        locker = subprocess.Popen(["sqlite3", "-batch", db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        locker.stdin.write(".timeout 10000\nBEGIN EXCLUSIVE;\nSELECT 'locked';\n")
        locker.stdin.flush()
        if locker.stdout.readline().strip() != "locked":
            raise RuntimeError("sqlite3 did not take the lock")
        locked = time.monotonic()
        time.sleep(args.store_lock)
        locker.stdin.write("COMMIT;\n")
        locker.stdin.close()
        locker.wait(30)
        locker = None
        released = time.monotonic()
        time.sleep(3)
        stop.set()
        prober.join(30)
        for w in workers:
            w.join(60)
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        server = None

        with sqlite3.connect(db) as c:
            stored = dict(c.execute("SELECT trial_id, count(*) FROM metrics GROUP BY trial_id").fetchall())
        sent = sum(w.sent for w in workers)
        stored_total = sum(stored.get(w.trial, 0) for w in workers)
        during = [p for p in probes if locked <= p[2] <= released]
        lat = [p[1] for p in during]
        statuses = {}
        for p in during:
            statuses[p[0]] = statuses.get(p[0], 0) + 1
        # A second after the lock was taken a report has met it.
        unblocked = [p for p in during if p[2] >= locked + 1.0 and p[0] == 200 and p[3] is not True]
        report_lat = [x for w in workers for x in w.latencies]
        failures = {}
        for w in workers:
            for k, n in w.failures.items():
                failures[k] = failures.get(k, 0) + n
        print("store lock: sqlite3 BEGIN EXCLUSIVE held %.1f s; %d workers" % (released - locked, args.workers))
        print("/healthz during the lock: %d probes, by status %s; p50 %.1f ms, p99 %.1f ms, max %.1f ms; "
              "%d not saying the store is blocked" % (len(during), statuses, lt.percentile(lat, 0.5) * 1e3,
                                                      lt.percentile(lat, 0.99) * 1e3, max(lat or [0]) * 1e3,
                                                      len(unblocked)))
        print("reports: %d requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms; refused and sent again: %s" % (
            len(report_lat), lt.percentile(report_lat, 0.5) * 1e3, lt.percentile(report_lat, 0.99) * 1e3,
            max(report_lat or [0]) * 1e3, failures or "none"))
        print("points: sent %d, stored %d, lost %d" % (sent, stored_total, sent - stored_total))
        if args.check:
            problems = []
            if not during or len(statuses) != 1 or 200 not in statuses:
                problems.append("/healthz during the lock: %s" % statuses)
            if not lt.percentile(lat, 0.99) < 0.1:
                problems.append("/healthz p99 %.1f ms during the lock" % (lt.percentile(lat, 0.99) * 1e3))
            if unblocked:
                problems.append("%d probes during the lock did not say the store is blocked" % len(unblocked))
            if stored_total != sent:
                problems.append("%d points lost (sent %d, stored %d)" % (sent - stored_total, sent, stored_total))
            if problems:
                print("load_test: FAILED: " + "; ".join(problems), file=sys.stderr)
                return 1
        return 0
    finally:
        if locker is not None:
            locker.kill()
        if server is not None:
            server.kill()
            server.wait()
        lt.release_all(work)
