"""A trial's Failure is typed (Stage, FailureKind) yet recorded in the study as the plain strings
older studies hold, so a stored study reads back the same."""

import json

from sweeper.outcomes import FailureKind, Stage
from sweeper.study.record import outcome_attrs
from sweeper.trial.context import Failure, TrialOutcome


def test_a_typed_failure_is_stored_as_the_strings_an_old_study_holds():
    outcome = TrialOutcome({}, failure=Failure(Stage.WAIT_READY, FailureKind.CUDA_GRAPH_CAPTURE, "boom", "tail"))
    stored = json.loads(json.dumps(outcome_attrs(outcome)))["failure"]
    assert stored == {"stage": "wait_ready", "kind": "cuda_graph_capture", "message": "boom", "log_tail": "tail"}
    assert type(stored["kind"]) is str and type(stored["stage"]) is str


def test_a_stored_failure_read_back_compares_equal_to_its_typed_kind():
    stored = {"stage": "load", "kind": "abandoned", "message": "x", "log_tail": ""}
    assert Failure(**stored) == Failure(Stage.LOAD, FailureKind.ABANDONED, "x")
    assert FailureKind(stored["kind"]) is FailureKind.ABANDONED and Stage(stored["stage"]) is Stage.LOAD
