"""Which sampler a study gets, and what it does with the queue: search/samplers.py."""

from __future__ import annotations

import optuna

from sweeper.errors import InfraError
from sweeper.search.samplers import QueueAwareBruteForceSampler, build_sampler
from sweeper.spec.space_file import parse_space

ONE_CONFIG = parse_space("""\
name: one
engine: sim
model: m
parameters:
  tp_size: {type: categorical, choices: [8], flag: --tp-size}
budget: {trials: 1}
""", "inline")


def test_a_small_space_gets_brute_force_that_runs_the_queued_retry_of_its_last_config():
    """The retry an infrastructure fault queues (study/objective.enqueue_retry) runs, though the
    failed trial took the grid's only config: Optuna's own sampler stopped the study there."""
    sampler = build_sampler(ONE_CONFIG, budget=1)
    assert isinstance(sampler, QueueAwareBruteForceSampler)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    ran = []

    def objective(trial: optuna.Trial) -> float:
        trial.suggest_categorical("tp_size", [8])
        ran.append(trial.number)
        if trial.number == 0:
            study.enqueue_trial(trial.params)  # as enqueue_retry does before the fault is raised
            raise InfraError("a port of the server was taken")
        return 1.0

    study.optimize(objective, n_trials=10, catch=(InfraError,))
    assert ran == [0, 1]  # the retry ran, and then the exhausted grid stopped the study
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.COMPLETE]
