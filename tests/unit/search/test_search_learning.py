"""Failures teach the sampler: on the demo space, the default search re-proposes configs it saw
crash far less than TPE fed crashes as FAIL (bench/search_efficiency.py has the full numbers)."""

import sys
import warnings

import optuna

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from model_search import simulate_search  # noqa: E402
from sweeper.spec.space_file import load_space
from sweeper.search.samplers import build_sampler


def test_crashed_configs_are_rarely_proposed_again():
    warnings.filterwarnings("ignore")
    space = load_space(ROOT / "search_spaces" / "demo-sim.yaml")
    ours, fail_fed = [], []
    for seed in range(3):
        ours.append(simulate_search(space, build_sampler(space, 36, "auto", seed), 36))
        fail_fed.append(simulate_search(space, optuna.samplers.TPESampler(seed=seed), 36, crash_as_fail=True,
                                        use_seeds=False))
    crashes_ours = sum(t.crashes for t in ours)
    crashes_fail = sum(t.crashes for t in fail_fed)
    # Learning from infeasible trials: fewer crashing launches in the same number of evaluations.
    assert crashes_ours < 0.8 * crashes_fail, (crashes_ours, crashes_fail)
