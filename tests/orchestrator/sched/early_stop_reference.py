#!/usr/bin/env python3
"""Reference decisions of Optuna's pruners on fixed synthetic learning curves.

Writes one JSON file: for each case (pruner settings x report order) the sequence of events
that Optuna saw, each report marked with Optuna's should_prune() answer, plus the rung values
Optuna recorded per trial. test_early_stop.cpp replays the same events through EarlyStopper.

Two report orders:
  sequential   trials run one after another (study.optimize with n_jobs=1 / max_concurrent=1)
  interleaved  four trials run at once at different speeds (study.ask()/tell()), reports in
               the order a scheduler with max_concurrent=4 would receive them

Non-finite values are written as the strings "nan", "inf", "-inf" (JSON has no such numbers).

Usage: early_stop_reference.py --out FILE
"""
import argparse
import heapq
import json
import math
import random
import warnings

import optuna

N_TRIALS = 30
MAX_STEP = 2000


def make_curves():
    """30 noisy decreasing loss curves: different rates and floors, crossings, ties, NaN, inf,
    and a few trials that report sparsely (so one report can cross several rungs)."""
    rng = random.Random(20240607)
    curves = []
    for i in range(N_TRIALS):
        interval = 50
        if i % 7 == 3:
            interval = 250
        elif i % 11 == 5:
            interval = 30
        floor = rng.uniform(1.2, 2.2)
        amp = rng.uniform(1.5, 4.0)
        tau = rng.uniform(150.0, 1200.0)
        noise = rng.uniform(0.0, 0.08)
        points = {}
        for s in range(interval, MAX_STEP + 1, interval):
            v = floor + amp * math.exp(-s / tau) + rng.gauss(0.0, noise)
            points[s] = round(v, 2)  # coarse rounding makes ties between trials common
        curves.append(points)
    # Exact twins: identical curves tie at every rung.
    curves[9] = dict(curves[8])
    curves[17] = dict(curves[16])
    # Diverges to NaN from step 600 on.
    for s in curves[12]:
        if s >= 600:
            curves[12][s] = math.nan
    # One NaN between rungs, finite again afterwards.
    curves[13][150] = math.nan
    # +inf on some steps (a loss that overflowed), finite later.
    for s in (100, 200, 250):
        if s in curves[14]:
            curves[14][s] = math.inf
    # Curves that cross: slow start, very low floor; then it diverges to NaN late.
    for s in curves[20]:
        curves[20][s] = round(1.0 + 5.0 * math.exp(-s / 180.0), 2) if s < 1000 else math.nan
    # NaN at the first report (trial 2 runs before any trial completes), NaN at a rung.
    curves[2][min(curves[2])] = math.nan
    curves[22][100] = math.nan
    # An infinite value in a trial that otherwise does well (it may complete).
    curves[25][500] = math.inf
    return curves


def encode(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def final_state(study, number):
    return study.trials[number].state.name


def finish(study, trial, points, sign, pruned):
    if pruned:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    else:
        last = sign * points[max(points)]
        if math.isnan(last):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, last)


def run_sequential(study, curves, sign):
    events = []
    for points in curves:
        trial = study.ask()
        pruned = False
        for s in sorted(points):
            v = sign * points[s]
            trial.report(v, s)
            pruned = bool(trial.should_prune())
            events.append({"type": "report", "trial": trial.number, "step": s, "value": encode(v),
                           "pruned": pruned})
            if pruned:
                break
        finish(study, trial, points, sign, pruned)
        events.append({"type": "end", "trial": trial.number, "state": final_state(study, trial.number)})
    return events


def run_interleaved(study, curves, sign, slots=4):
    """Event-driven simulation: each trial has its own seconds per step; the next trial starts
    when a slot frees up. Reports are handled in time order (ties by trial number)."""
    rng = random.Random(7)
    speed = [rng.uniform(0.5, 2.0) for _ in curves]
    events = []
    queue = []  # (time, trial number, index into its sorted steps)
    trials = {}
    steps = {}
    next_trial = 0

    def start(now):
        nonlocal next_trial
        t = study.ask()
        assert t.number == next_trial
        trials[t.number] = t
        steps[t.number] = sorted(curves[t.number])
        s0 = steps[t.number][0]
        heapq.heappush(queue, (now + s0 * speed[t.number], t.number, 0))
        next_trial += 1

    while next_trial < min(slots, len(curves)):
        start(0.0)
    while queue:
        now, n, k = heapq.heappop(queue)
        trial, points = trials[n], curves[n]
        s = steps[n][k]
        v = sign * points[s]
        trial.report(v, s)
        pruned = bool(trial.should_prune())
        events.append({"type": "report", "trial": n, "step": s, "value": encode(v), "pruned": pruned})
        if pruned or k + 1 == len(steps[n]):
            finish(study, trial, points, sign, pruned)
            events.append({"type": "end", "trial": n, "state": final_state(study, n)})
            if next_trial < len(curves):
                start(now)
        else:
            s_next = steps[n][k + 1]
            heapq.heappush(queue, (now + (s_next - s) * speed[n], n, k + 1))
    return events


def rung_values(study):
    out = {}
    for t in study.trials:
        r = {}
        for key, v in t.system_attrs.items():
            if key.startswith("completed_rung_"):
                r[key[len("completed_rung_"):]] = encode(v)
        out[str(t.number)] = r
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    curves = make_curves()
    asha = [
        dict(min_step=100, reduction_factor=2, min_early_stopping_rate=0, mode="min"),
        dict(min_step=100, reduction_factor=3, min_early_stopping_rate=0, mode="min"),
        dict(min_step=100, reduction_factor=4, min_early_stopping_rate=0, mode="min"),
        dict(min_step=100, reduction_factor=3, min_early_stopping_rate=1, mode="min"),
        dict(min_step=100, reduction_factor=2, min_early_stopping_rate=1, mode="max"),
        dict(min_step=100, reduction_factor=3, min_early_stopping_rate=0, mode="max"),
        dict(min_step=50, reduction_factor=4, min_early_stopping_rate=1, mode="max"),
        dict(min_step=60, reduction_factor=2, min_early_stopping_rate=0, mode="min"),
    ]
    # Hyperband's brackets are picked from crc32("<study_name>_<number>"): the names vary the split.
    hyperband = [
        dict(min_step=100, max_step=2000, reduction_factor=3, mode="min", study_name="hyperband-a"),
        dict(min_step=50, max_step=2000, reduction_factor=2, mode="min", study_name="sweep"),
        dict(min_step=100, max_step=1000, reduction_factor=2, mode="max", study_name="lr-search"),
        dict(min_step=60, max_step=1800, reduction_factor=3, mode="min", study_name="x"),
    ]
    median = [
        dict(n_startup_trials=5, n_warmup_steps=0, interval=1, mode="min"),
        dict(n_startup_trials=3, n_warmup_steps=200, interval=150, mode="min"),
        dict(n_startup_trials=2, n_warmup_steps=100, interval=1, mode="max"),
        dict(n_startup_trials=0, n_warmup_steps=0, interval=500, mode="max"),
    ]
    cases = []
    for order, runner in (("sequential", run_sequential), ("interleaved", run_interleaved)):
        for a in asha:
            pruner = optuna.pruners.SuccessiveHalvingPruner(
                min_resource=a["min_step"], reduction_factor=a["reduction_factor"],
                min_early_stopping_rate=a["min_early_stopping_rate"], bootstrap_count=0)
            study = optuna.create_study(
                storage=optuna.storages.InMemoryStorage(), pruner=pruner,
                direction="minimize" if a["mode"] == "min" else "maximize")
            sign = 1.0 if a["mode"] == "min" else -1.0
            events = runner(study, curves, sign)
            cases.append({"method": "asha", "order": order, "settings": a, "events": events,
                          "rungs": rung_values(study)})
        for h in hyperband:
            pruner = optuna.pruners.HyperbandPruner(
                min_resource=h["min_step"], max_resource=h["max_step"],
                reduction_factor=h["reduction_factor"], bootstrap_count=0)
            study = optuna.create_study(
                storage=optuna.storages.InMemoryStorage(), pruner=pruner, study_name=h["study_name"],
                direction="minimize" if h["mode"] == "min" else "maximize")
            sign = 1.0 if h["mode"] == "min" else -1.0
            events = runner(study, curves, sign)
            brackets = {str(t.number): pruner._get_bracket_id(study, t) for t in study.trials}
            cases.append({"method": "hyperband", "order": order, "settings": h, "events": events,
                          "rungs": rung_values(study), "brackets": brackets})
        for m in median:
            pruner = optuna.pruners.MedianPruner(
                n_startup_trials=m["n_startup_trials"], n_warmup_steps=m["n_warmup_steps"],
                interval_steps=m["interval"])
            study = optuna.create_study(
                storage=optuna.storages.InMemoryStorage(), pruner=pruner,
                direction="minimize" if m["mode"] == "min" else "maximize")
            sign = 1.0 if m["mode"] == "min" else -1.0
            events = runner(study, curves, sign)
            cases.append({"method": "median", "order": order, "settings": m, "events": events})
    with open(args.out, "w") as f:
        json.dump({"optuna": optuna.__version__, "cases": cases}, f, allow_nan=False)


if __name__ == "__main__":
    main()
