"""`sim best` refuses what it cannot enumerate, with one guard for the optimum and the front."""

from __future__ import annotations

import pytest

from sweeper.errors import UserError
from sweeper.sim.best import best_config, enumerated_sim_configs, modelled_front
from sweeper.spec.space_file import parse_space
from tests.support.spaces import TINY_SPACE


def test_the_tiny_space_is_enumerated_and_its_optimum_is_feasible():
    space = parse_space(TINY_SPACE, "tiny.yaml")
    configs = enumerated_sim_configs(space, ["output_throughput"])
    assert len(configs) == 2 * 2 * 3 * 2 * 2
    optimum = best_config(space)
    assert optimum.config in configs and 0 < optimum.feasible < optimum.total == len(configs)


def test_a_space_on_another_engine_is_refused():
    space = parse_space(TINY_SPACE.replace("engine: sim", "engine: vllm"), "tiny.yaml")
    with pytest.raises(UserError, match="uses engine 'vllm'; `sim best` needs engine: sim"):
        best_config(space)
    with pytest.raises(UserError, match="needs engine: sim"):
        modelled_front(space)


def test_an_unmodelled_goal_is_named():
    space = parse_space(TINY_SPACE, "tiny.yaml")
    with pytest.raises(UserError, match=r"the simulator models .*, not p50_tpot_ms$"):
        enumerated_sim_configs(space, ["output_throughput", "p50_tpot_ms"])


def test_a_float_without_a_step_is_not_finite():
    text = TINY_SPACE.replace("parameters:\n", "parameters:\n  mem: {type: float, low: 0.5, high: 0.9, flag: --mem-fraction-static}\n")
    with pytest.raises(UserError, match="is not finite .*give every float a step"):
        best_config(parse_space(text, "tiny.yaml"))
