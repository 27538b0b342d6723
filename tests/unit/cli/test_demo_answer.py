"""`sweeper demo`'s last lines: the winner and its distance to the simulator's optimum, or one clear
line and exit 1 when its sweep ranked nothing (seen on an overloaded machine: every level invalid)."""

from __future__ import annotations

import pytest

from sweeper.cli.sim import format_demo_answer
from sweeper.errors import NothingFeasible
from sweeper.sim.best import SimOptimum
from sweeper.trial.context import Failure, TrialOutcome
from tests.support.studies import TP_SPACE, level, make_study, record

OPTIMUM = SimOptimum(config={"tp": 8}, value=20.0, feasible=2, total=2)


def test_a_demo_that_ranked_nothing_says_so_and_exits_1():
    study = make_study()
    record(study, {}, TrialOutcome({}, failure=Failure("load", "invalid_measurement", "client lagged"), launched=True))
    with pytest.raises(NothingFeasible, match="ranked no config") as raised:
        format_demo_answer(TP_SPACE, study, OPTIMUM)
    assert raised.value.exit_code == 1


def test_the_winner_the_optimum_and_the_distance():
    study = make_study()
    number = record(study, {}, TrialOutcome({}, levels={1: level(9.0), 16: level(18.0)}, output_text="Paris", launched=True))
    winner, optimum, distance = format_demo_answer(TP_SPACE, study, OPTIMUM)
    assert winner.startswith(f"winner: trial {number}: tp=")
    assert optimum == "the simulator's optimum (modelled, 2 feasible of 2 configs): 20.00 with tp=8"
    assert distance.startswith(f"study {study.study_name}: best trial {number} measured 18.00, modelled ")
