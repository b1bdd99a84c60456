"""Optuna's TPE pieces on fixed cases, for tests/orchestrator/recipe/test_tpe.cpp: the log-densities of
its _ParzenEstimator (l and g) at given points, default_weights, default_gamma and the ranking of
_split_observation_pairs, each written to a JSON file the C++ test compares with its own.

Optuna 3.1's truncated-normal logpdf leaves out the 1/sigma of the density (later Optuna adds
it); the reference adds it back, so that both sides compute the density itself."""
import argparse
import json
import math

import numpy as np
from optuna import distributions
from optuna.samplers._tpe import _truncnorm
from optuna.samplers._tpe import sampler as tpe_sampler
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters

_plain_logpdf = _truncnorm.logpdf


def _logpdf_with_scale(x, a, b, loc=0, scale=1):
    return _plain_logpdf(x, a, b, loc=loc, scale=scale) - np.log(scale)


_truncnorm.logpdf = _logpdf_with_scale

# Univariate bandwidths sort the kernels' centres with numpy's default (unstable) sort: equal
# centres (integer keys, many trials) then take their neighbours' gaps in an order numpy's sort
# algorithm decides, which matters once older trials weigh less (past 25). precon keeps trial
# order among equals; the reference sorts the same way.
_plain_argsort = np.argsort
np.argsort = lambda a, *args, **kw: _plain_argsort(a, *args, **{"kind": "stable", **kw})


def distribution(p):
    if p["kind"] == "categorical":
        return distributions.CategoricalDistribution(list(range(p["choices"])))
    if p["kind"] == "integer":
        return distributions.IntDistribution(int(p["lo"]), int(p["hi"]), step=int(p["step"]))
    return distributions.FloatDistribution(p["lo"], p["hi"], log=p["log"], step=p["step"] or None)


def draw(rng, p, n):
    if p["kind"] == "categorical":
        return rng.randint(0, p["choices"], size=n).astype(float)
    if p["kind"] == "integer":
        cells = (p["hi"] - p["lo"]) // p["step"] + 1
        return (p["lo"] + rng.randint(0, cells, size=n) * p["step"]).astype(float)
    if p["step"]:
        cells = int(round((p["hi"] - p["lo"]) / p["step"])) + 1
        return p["lo"] + rng.randint(0, cells, size=n) * p["step"]
    if p["log"]:
        return np.exp(rng.uniform(math.log(p["lo"]), math.log(p["hi"]), size=n))
    return rng.uniform(p["lo"], p["hi"], size=n)


def real(lo, hi, log=False, step=0.0):
    return {"kind": "real", "lo": lo, "hi": hi, "log": log, "step": step}


SPACES = [
    [real(-5.0, 10.0), real(0.0, 15.0)],
    [real(1e-5, 1e-1, log=True), {"kind": "categorical", "choices": 3}],
    [{"kind": "integer", "lo": 1, "hi": 9, "step": 1, "log": False}, real(0.0, 1.0, step=0.125)],
    [real(0.0, 1.0)] * 6,
    [{"kind": "integer", "lo": 0, "hi": 30, "step": 3, "log": False}],
    [real(-2.0, 2.0)],
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.RandomState(7)
    cases = []
    for s, space in enumerate(SPACES):
        names = [f"x{i}" for i in range(len(space))]
        search = {n: distribution(p) for n, p in zip(names, space)}
        for n_obs in (0, 1, 7, 30):
            for multivariate in (True, False):
                for prior_weight, endpoints in ((1.0, False), (2.5, True)):
                    params = _ParzenEstimatorParameters(
                        consider_prior=True, prior_weight=prior_weight, consider_magic_clip=True,
                        consider_endpoints=endpoints, weights=tpe_sampler.default_weights,
                        multivariate=multivariate)
                    obs = {n: draw(rng, p, n_obs) for n, p in zip(names, space)}
                    pts = {n: draw(rng, p, 12) for n, p in zip(names, space)}
                    pe = _ParzenEstimator({n: obs[n].copy() for n in names}, search, params)
                    internal = {n: (pts[n].astype(int) if space[i]["kind"] == "categorical" else pts[n])
                                for i, n in enumerate(names)}
                    logp = pe.log_pdf(internal)
                    cases.append({
                        "space": space, "multivariate": multivariate, "prior_weight": prior_weight,
                        "consider_endpoints": endpoints,
                        "observations": [[float(obs[n][i]) for n in names] for i in range(n_obs)],
                        "points": [[float(pts[n][i]) for n in names] for i in range(12)],
                        "log_pdf": [float(v) for v in logp],
                    })
    weights = {str(n): [float(w) for w in tpe_sampler.default_weights(n)] for n in (0, 1, 24, 25, 26, 40, 100)}
    gamma = {str(n): int(tpe_sampler.default_gamma(n)) for n in (0, 1, 9, 10, 11, 100, 249, 250, 251, 1000)}
    # Ranking: complete (value), pruned (step, value; NaN value; no value), running; both modes.
    trials = []
    for i in range(40):
        kind = ["complete", "pruned", "running"][rng.randint(0, 3)]
        value = float(rng.randint(0, 6))  # ties, so that the order of equals is tested too
        step = int(rng.randint(-1, 4)) if kind == "pruned" else -1
        if kind == "pruned" and rng.rand() < 0.15:
            value = float("nan")
        trials.append({"state": kind, "value": value, "step": step})
    ranks = {}
    for mode, sign in (("min", 1), ("max", -1)):
        scores = []
        for t in trials:
            if t["state"] == "complete":
                scores.append((-float("inf"), [sign * t["value"]]))
            elif t["state"] == "pruned":
                if t["step"] < 0:
                    scores.append((1, [0.0]))
                elif math.isnan(t["value"]):
                    scores.append((-t["step"], [float("inf")]))
                else:
                    scores.append((-t["step"], [sign * t["value"]]))
            else:
                scores.append((float("inf"), [sign * float("inf")]))
        ranks[mode] = {}
        for n_below in (0, 5, 13, 40):
            below, above = tpe_sampler._split_observation_pairs(scores, n_below, None)
            ranks[mode][str(n_below)] = {"below": [int(i) for i in below], "above": [int(i) for i in above]}
    for t in trials:
        if math.isnan(t["value"]):
            t["value"] = "nan"
    with open(args.out, "w") as f:
        json.dump({"cases": cases, "weights": weights, "gamma": gamma, "trials": trials, "split": ranks}, f)


if __name__ == "__main__":
    main()
