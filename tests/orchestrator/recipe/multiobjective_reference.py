"""Optuna 3.1's multi-objective pieces on fixed random cases, for
tests/orchestrator/recipe/test_multiobjective.cpp: MOTPE's non-domination ranks, its below/above
split (rank, then greedy hypervolume subset selection) and the below trials' weights, the WFG
hypervolume, the log-densities of l(x) (weighted by those weights) and g(x) at candidate points
(so the proposal, their best l/g, is Optuna's), and NSGA-II's fronts, crowding sort and elite
population. Everything is written to one JSON file the C++ test compares with its own."""
import argparse
import json
import warnings

import numpy as np
import optuna
from optuna import distributions
from optuna._hypervolume import WFG
from optuna.samplers._tpe import _truncnorm
from optuna.samplers._tpe import sampler as tpe_sampler
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers.nsgaii import _sampler as nsga_sampler

warnings.simplefilter("ignore")
optuna.logging.set_verbosity(optuna.logging.ERROR)

# As tpe_reference.py: Optuna 3.1's truncated-normal logpdf leaves out the 1/sigma of the density.
_plain_logpdf = _truncnorm.logpdf
_truncnorm.logpdf = lambda x, a, b, loc=0, scale=1: _plain_logpdf(x, a, b, loc=loc, scale=scale) - np.log(scale)

# As tpe_reference.py: univariate bandwidths sort the kernels' centres; equal centres (an integer
# key) keep trial order in precon, so the reference sorts stably too.
_plain_argsort = np.argsort
np.argsort = lambda a, *args, **kw: _plain_argsort(a, *args, **{"kind": "stable", **kw})


def losses(rng, n, k, ties):
    if ties:
        return rng.randint(0, 5, size=(n, k)).astype(float)
    return rng.uniform(-1.0, 3.0, size=(n, k))


def motpe_cases(rng):
    out = []
    for k in (2, 3):
        for n in (1, 2, 7, 20, 45):
            for ties in (False, True):
                lv = losses(rng, n, k, ties)
                scores = [(-float("inf"), list(v)) for v in lv]
                n_below = tpe_sampler.default_gamma(n)
                below, above = tpe_sampler._split_observation_pairs(scores, n_below, None)
                weights = tpe_sampler._calculate_weights_below_for_multi_objective(scores, below, None)
                ranks = tpe_sampler._calculate_nondomination_rank(lv)
                ref = np.maximum(1.1 * lv.max(axis=0), 0.9 * lv.max(axis=0))
                ref[ref == 0] = 1e-12
                out.append({
                    "losses": lv.tolist(), "n_below": int(n_below), "ranks": [int(r) for r in ranks],
                    "below": [int(i) for i in below], "above": [int(i) for i in above],
                    "weights": [float(w) for w in weights],
                    "reference": ref.tolist(), "hypervolume": float(WFG().compute(lv, ref)),
                })
    return out


def estimator_cases(rng):
    # l(x) with MOTPE's weights and g(x) over a mixed space, at fixed candidates.
    space = [{"kind": "real", "lo": -5.0, "hi": 10.0, "log": False, "step": 0.0},
             {"kind": "real", "lo": 1e-5, "hi": 1e-1, "log": True, "step": 0.0},
             {"kind": "integer", "lo": 0, "hi": 20, "step": 4, "log": False},
             {"kind": "categorical", "choices": 3}]
    search = {
        "x0": distributions.FloatDistribution(-5.0, 10.0),
        "x1": distributions.FloatDistribution(1e-5, 1e-1, log=True),
        "x2": distributions.IntDistribution(0, 20, step=4),
        "x3": distributions.CategoricalDistribution([0, 1, 2]),
    }
    names = list(search)
    out = []
    for n in (11, 30):
        for multivariate in (True, False):
            xs = np.stack([rng.uniform(-5, 10, n), np.exp(rng.uniform(np.log(1e-5), np.log(1e-1), n)),
                           rng.randint(0, 6, n) * 4.0, rng.randint(0, 3, n).astype(float)], axis=1)
            lv = losses(rng, n, 2, False)
            scores = [(-float("inf"), list(v)) for v in lv]
            below, above = tpe_sampler._split_observation_pairs(scores, tpe_sampler.default_gamma(n), None)
            weights = tpe_sampler._calculate_weights_below_for_multi_objective(scores, below, None)
            params = _ParzenEstimatorParameters(
                consider_prior=True, prior_weight=1.0, consider_magic_clip=True, consider_endpoints=False,
                weights=tpe_sampler.default_weights, multivariate=multivariate)
            obs = {nm: xs[:, i] for i, nm in enumerate(names)}
            l = _ParzenEstimator({nm: obs[nm][below] for nm in names}, search, params, weights)
            g = _ParzenEstimator({nm: obs[nm][above] for nm in names}, search, params)
            pts = np.stack([rng.uniform(-5, 10, 16), np.exp(rng.uniform(np.log(1e-5), np.log(1e-1), 16)),
                            rng.randint(0, 6, 16) * 4.0, rng.randint(0, 3, 16).astype(float)], axis=1)
            internal = {nm: (pts[:, i].astype(int) if nm == "x3" else pts[:, i]) for i, nm in enumerate(names)}
            out.append({"space": space, "multivariate": multivariate, "x": xs.tolist(), "losses": lv.tolist(),
                        "points": pts.tolist(), "log_l": [float(v) for v in l.log_pdf(internal)],
                        "log_g": [float(v) for v in g.log_pdf(internal)]})
    return out


def nsga_cases(rng):
    out = []
    for k, directions in ((2, ["minimize", "minimize"]), (2, ["minimize", "maximize"]),
                          (3, ["minimize", "maximize", "minimize"])):
        for n, size in ((12, 5), (30, 10), (8, 8)):
            for ties in (False, True):
                values = losses(rng, n, k, ties)
                study = optuna.create_study(directions=directions)
                for v in values:
                    study.add_trial(optuna.trial.create_trial(values=list(v), params={}, distributions={}))
                trials = study.get_trials(deepcopy=False)
                sampler = nsga_sampler.NSGAIISampler(population_size=size)
                fronts = sampler._fast_non_dominated_sort(list(trials), study.directions)
                elite = sampler._select_elite_population(study, list(trials))
                crowd = list(trials)
                nsga_sampler._crowding_distance_sort(crowd)
                out.append({"values": values.tolist(), "maximize": [d == "maximize" for d in directions],
                            "size": size, "fronts": [[t.number for t in f] for f in fronts],
                            "elite": [t.number for t in elite], "crowding": [t.number for t in crowd]})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.RandomState(11)
    with open(args.out, "w") as f:
        json.dump({"motpe": motpe_cases(rng), "estimators": estimator_cases(rng), "nsga2": nsga_cases(rng)}, f)


if __name__ == "__main__":
    main()
