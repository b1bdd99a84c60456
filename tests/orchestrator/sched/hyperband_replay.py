#!/usr/bin/env python3
"""Replays a sweep's stored curves through Optuna's HyperbandPruner, trial after trial.

Input (JSON): {"study_name", "min_step", "max_step", "reduction_factor", "mode": "min"|"max",
"trials": [[[step, value], ...], ...]} with the trials in the order of their numbers, as they ran
one at a time. Output (JSON, stdout): {"brackets": [b, ...], "pruned_at": [step or null, ...]}:
each trial's bracket and the step of the report Optuna's should_prune() first answered True.

Usage: hyperband_replay.py INPUT.json
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
    pruner = optuna.pruners.HyperbandPruner(
        min_resource=spec["min_step"], max_resource=spec["max_step"],
        reduction_factor=spec["reduction_factor"], bootstrap_count=0)
    study = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(), pruner=pruner, study_name=spec["study_name"],
        direction="minimize" if spec["mode"] == "min" else "maximize")
    pruned_at = []
    for points in spec["trials"]:
        trial = study.ask()
        at = None
        for step, value in sorted(points):
            trial.report(value, step)
            if trial.should_prune():
                at = step
                break
        if at is None:
            study.tell(trial, sorted(points)[-1][1])
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        pruned_at.append(at)
    brackets = [pruner._get_bracket_id(study, t) for t in study.trials]
    json.dump({"brackets": brackets, "pruned_at": pruned_at}, sys.stdout)


if __name__ == "__main__":
    main()
