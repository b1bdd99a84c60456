#!/usr/bin/env python3
"""Optuna's FanovaImportanceEvaluator on given trials (needs python3-optuna and python3-sklearn).

Input (JSON): {"params": [{"name", "kind": "numeric", "range": [lo, hi]} or
{"name", "kind": "categorical", "choices": n}], "trials": [{"values": [...], "objective": y}],
"seed": s}; a categorical value is its choice's index. Output (JSON, stdout): {name: importance}.

Usage: fanova_reference.py INPUT.json
"""
import json
import sys
import warnings

import optuna


def main():
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    distributions = {}
    for p in spec["params"]:
        if p["kind"] == "numeric":
            distributions[p["name"]] = optuna.distributions.FloatDistribution(*p["range"])
        else:
            distributions[p["name"]] = optuna.distributions.CategoricalDistribution(list(range(p["choices"])))
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    for t in spec["trials"]:
        params = {}
        for p, v in zip(spec["params"], t["values"]):
            params[p["name"]] = v if p["kind"] == "numeric" else int(v)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=t["objective"]))
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=spec["seed"])
    json.dump(optuna.importance.get_param_importances(study, evaluator=evaluator), sys.stdout)


if __name__ == "__main__":
    main()
