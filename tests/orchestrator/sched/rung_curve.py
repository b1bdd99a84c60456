#!/usr/bin/env python3
"""A trial program with a chosen curve, for the promotion tests (test_promotion.cpp).

Usage: rung_curve.py DB A B SWITCH STEPS

val_loss is A below step SWITCH and B from it on, for steps 1..STEPS. Each step appends its line to
metrics.jsonl and its number to the file `checkpoint`, then waits until the controller has stored
the line (the trial's last_step in the controller's database DB): the controller decides each rung
before the program goes past it, whatever the machine's speed. A SIGTERM ends it between steps
(exit 0). With PRECON_RESUME=1 it resumes after its checkpoint. Each attempt appends the step it
starts at to attempts.log.
"""
import json
import os
import signal
import sqlite3
import sys
import time


def main():
    db, a, b, switch, steps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    trial = int(os.environ["PRECON_TRIAL_ID"])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    start = 1
    if os.environ.get("PRECON_RESUME") == "1" and os.path.exists("checkpoint"):
        with open("checkpoint") as f:
            start = int(f.read()) + 1
    with open("attempts.log", "a") as f:
        f.write(f"{start}\n")
    conn = sqlite3.connect(db, timeout=30)
    deadline = time.monotonic() + 120  # a controller that never stores the line: give up, not hang
    for step in range(start, steps + 1):
        if stop:
            return 0
        with open("metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "val_loss": a if step < switch else b}) + "\n")
        with open("checkpoint.tmp", "w") as f:
            f.write(str(step))
        os.replace("checkpoint.tmp", "checkpoint")
        while not stop:
            row = conn.execute("SELECT last_step FROM trials WHERE id = ?", (trial,)).fetchall()
            if row and row[0][0] >= step:
                break
            if time.monotonic() > deadline:
                return 1
            time.sleep(0.005)
    return 0


if __name__ == "__main__":
    sys.exit(main())
