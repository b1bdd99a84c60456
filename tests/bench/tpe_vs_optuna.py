"""precon's TPE (sweep.method = "tpe") against Optuna's TPESampler and random search on the same
objectives. precon runs each objective as a trial program ([trial] command, `precon run`); Optuna
calls the same function in process. For each function and seed: the best value after `--trials`
trials and the area under the best-so-far curve (the mean of best-so-far over the trials); for
each pair of methods a two-sided Mann-Whitney U test over the seeds.

  python3 tests/bench/tpe_vs_optuna.py --precon build/orchestrator/precon --seeds 20 --trials 50

Both TPEs run with the same settings: 10 random startup trials, 24 candidates, multivariate,
constant liar, prior weight 1, one trial at a time. Needs Debian's python3-optuna."""
import argparse
import concurrent.futures
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
import tempfile

# ---- the objectives (also run as the trial program: objective.py FUNCTION) ----

HARTMANN_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
HARTMANN_P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
              [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]
HARTMANN_ALPHA = [1.0, 1.2, 3.0, 3.2]


def branin(p):
    x, y = p["x"], p["y"]
    return (y - 5.1 / (4 * math.pi ** 2) * x * x + 5 / math.pi * x - 6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x) + 10


def hartmann6(p):
    x = [p[f"x{i}"] for i in range(6)]
    total = 0.0
    for i in range(4):
        inner = sum(HARTMANN_A[i][j] * (x[j] - HARTMANN_P[i][j] * 1e-4) ** 2 for j in range(6))
        total += HARTMANN_ALPHA[i] * math.exp(-inner)
    return -total


def lr_curve(p):
    # A loss against log10(lr) with its minimum near 3e-3 per activation, and noise that depends
    # only on the point (every method sees the same value for the same point).
    offset = {"relu": 0.05, "gelu": 0.0, "tanh": 0.2}[p["act"]]
    u = math.log10(p["lr"]) + 2.5
    base = 2.0 + 0.3 * u * u + offset + (0.8 * math.exp(2 * (u - 1.5)) if u > 1.5 else 0.0)
    noise = random.Random(f"{p['lr']:.17g}/{p['act']}").gauss(0.0, 0.02)
    return base + noise


def rosenbrock5(p):
    x = [p[f"x{i}"] for i in range(5)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4))


FUNCTIONS = {
    "branin": (branin, {"x": ("uniform", -5.0, 10.0), "y": ("uniform", 0.0, 15.0)}),
    "hartmann6": (hartmann6, {f"x{i}": ("uniform", 0.0, 1.0) for i in range(6)}),
    "lr_curve": (lr_curve, {"lr": ("log_uniform", 1e-5, 1.0), "act": ("choice", ["relu", "gelu", "tanh"])}),
    "rosenbrock5": (rosenbrock5, {f"x{i}": ("uniform", -2.0, 2.0) for i in range(5)}),
}


def trial_program(name):
    p = json.loads(os.environ["PRECON_PARAMS"])
    value = FUNCTIONS[name][0](p)
    with open(os.path.join(os.environ["PRECON_RUN_DIR"], "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": 1, "val_loss": value}) + "\n")


# ---- the methods ----


def toml_value(v):
    return json.dumps(v)


def run_precon(precon, name, seed, trials, workdir):
    space = FUNCTIONS[name][1]
    d = os.path.join(workdir, f"{name}-{seed}")
    os.makedirs(d, exist_ok=True)
    lines = [
        "[experiment]", f'name = "{name}-{seed}"',
        "[trial]", f"command = [{toml_value(sys.executable)}, {toml_value(os.path.abspath(__file__))}, \"--objective\", \"{name}\"]",
        "[sweep]", 'method = "tpe"', f"samples = {trials}", f"seed = {seed}", "max_concurrent = 1", "max_attempts = 1",
        "[sweep.parameters]",
    ]
    for key, spec in space.items():
        if spec[0] == "choice":
            lines.append(f"{key} = {{ choice = {toml_value(spec[1])} }}")
        else:
            lines.append(f"{key} = {{ {spec[0]} = [{spec[1]!r}, {spec[2]!r}] }}")
    recipe = os.path.join(d, "recipe.toml")
    with open(recipe, "w") as f:
        f.write("\n".join(lines) + "\n")
    db = os.path.join(d, "precon.db")
    subprocess.run([precon, "run", recipe, "--db", db, "--runs", os.path.join(d, "runs"), "--port", "0", "--quiet", "--cpus", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=d)
    con = sqlite3.connect(db)
    rows = con.execute("SELECT idx, state, run_dir FROM trials ORDER BY idx").fetchall()
    con.close()
    values = []
    for idx, state, run_dir in rows:
        value = None
        path = os.path.join(run_dir, "metrics.jsonl")
        if state == "completed" and os.path.exists(path):
            with open(path) as f:
                value = json.loads(f.read().splitlines()[-1])["val_loss"]
        values.append(value)
    if len(values) != trials or any(v is None for v in values):
        raise RuntimeError(f"{name} seed {seed}: precon stored {len(values)} trials, values {values}")
    return values


def run_optuna(name, seed, trials, sampler_name):
    import numpy as np
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings
    warnings.simplefilter("ignore")
    fn, space = FUNCTIONS[name]
    from optuna.samplers._tpe import _truncnorm
    plain_logpdf = _truncnorm.logpdf
    if sampler_name == "optuna_fixed":
        # Optuna 3.1's truncated-normal logpdf leaves out the kernel's 1/sigma (later Optuna has
        # it, as precon does): the same sampler with the density itself.
        _truncnorm.logpdf = lambda x, a, b, loc=0, scale=1: plain_logpdf(x, a, b, loc=loc, scale=scale) - np.log(scale)
    if sampler_name in ("optuna", "optuna_fixed"):
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, n_ei_candidates=24, multivariate=True,
                                             constant_liar=True, prior_weight=1.0)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(sampler=sampler, direction="minimize")

    def objective(trial):
        p = {}
        for key, spec in space.items():
            if spec[0] == "choice":
                p[key] = trial.suggest_categorical(key, spec[1])
            else:
                p[key] = trial.suggest_float(key, spec[1], spec[2], log=spec[0] == "log_uniform")
        return fn(p)

    try:
        study.optimize(objective, n_trials=trials)
    finally:
        _truncnorm.logpdf = plain_logpdf
    return [t.value for t in study.trials]


# ---- statistics ----


def mann_whitney(a, b):
    """Two-sided Mann-Whitney U test, normal approximation with the tie correction and a
    continuity correction (scipy's default method for samples of this size). Returns (U of a, p)."""
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    n1, n2 = len(a), len(b)
    r1 = sum(r for r, (_, g) in zip(ranks, pooled) if g == 0)
    u1 = r1 - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    if sigma == 0:
        return u1, 1.0
    z = (abs(u1 - mu) - 0.5) / sigma
    return u1, math.erfc(max(z, 0) / math.sqrt(2))


def summarise(values):
    best, curve = math.inf, []
    for v in values:
        best = min(best, v)
        curve.append(best)
    return best, sum(curve) / len(curve)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objective", help=argparse.SUPPRESS)
    ap.add_argument("--precon", default="build/orchestrator/precon")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=3, help="precon runs at once")
    ap.add_argument("--functions", default=",".join(FUNCTIONS))
    ap.add_argument("--out", help="write every run's values here (JSON)")
    ap.add_argument("--precon-results", help="take precon's values from this --out file instead of running it")
    args = ap.parse_args()
    if args.objective:
        trial_program(args.objective)
        return
    precon = os.path.abspath(args.precon)
    names = args.functions.split(",")
    methods = ("precon", "optuna", "optuna_fixed", "random")
    results = {n: {m: {} for m in methods} for n in names}
    earlier = None
    if args.precon_results:
        with open(args.precon_results) as f:
            earlier = json.load(f)
    with tempfile.TemporaryDirectory(prefix="tpe_bench_") as work:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {} if earlier else {pool.submit(run_precon, precon, n, s, args.trials, work): (n, s)
                                          for n in names for s in range(args.seeds)}
            for n in names:
                for s in range(args.seeds):
                    for m in methods[1:]:
                        results[n][m][s] = run_optuna(n, s, args.trials, m)
            for f, (n, s) in futures.items():
                results[n]["precon"][s] = f.result()
    if earlier:
        for n in names:
            for s in range(args.seeds):
                results[n]["precon"][s] = earlier[n]["precon"][str(s)]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f)
    print(f"{args.trials} trials x {args.seeds} seeds; median over seeds; p: two-sided Mann-Whitney U\n")
    print("| function | metric | precon TPE | Optuna TPE | Optuna TPE, density fixed | random | "
          "p (precon vs Optuna) | p (precon vs fixed) | p (precon vs random) |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for n in names:
        for metric, idx in (("best", 0), ("area", 1)):
            col = {m: [summarise(results[n][m][s])[idx] for s in range(args.seeds)] for m in methods}
            _, p_opt = mann_whitney(col["precon"], col["optuna"])
            _, p_fix = mann_whitney(col["precon"], col["optuna_fixed"])
            _, p_rand = mann_whitney(col["precon"], col["random"])
            print(f"| {n} | {metric} | {median(col['precon']):.4g} | {median(col['optuna']):.4g} | "
                  f"{median(col['optuna_fixed']):.4g} | {median(col['random']):.4g} | {p_opt:.3f} | {p_fix:.3f} | "
                  f"{p_rand:.2g} |")
            worse = p_opt < 0.05 and median(col["precon"]) > median(col["optuna"])
            better_than_random = p_rand < 0.05 and median(col["precon"]) < median(col["random"])
            verdicts.append((n, metric, worse, better_than_random))
    print()
    for n, metric, worse, better in verdicts:
        print(f"{n} {metric}: {'significantly worse than Optuna' if worse else 'not worse than Optuna'}, "
              f"{'better than random' if better else 'NOT significantly better than random'}")


if __name__ == "__main__":
    main()
