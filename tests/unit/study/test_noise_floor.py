"""A study's noise floor (sweeper/study/noise.py), the campaign's choice of in-launch repeats from it, the
simulator's between/within-launch noise, and where a level's measurement mode comes from."""

from __future__ import annotations

import random

import pytest

from sweeper.engines import get_engine
from sweeper.engines.vllm import VLLMEngine
from sweeper.study.noise import NoiseFloor, best_repeats, pooled_noise, variance_components
from sweeper.sim.scheduler import Jitter
from sweeper.spec.space import DEFAULT_STEADY_PRECISION, Workload


EAGER = {"eager": {"type": "bool", "flag": "--enforce-eager"}}


def launches(rng: random.Random, mean: float, between: float, within: float, n: int, m: int) -> list[list[float]]:
    out = []
    for _ in range(n):
        level = mean * (1 + rng.gauss(0, between))
        out.append([level * (1 + rng.gauss(0, within)) for _ in range(m)])
    return out


@pytest.mark.parametrize("between,within", [(0.15, 0.02), (0.02, 0.10), (0.0, 0.05)])
def test_variance_components_recover_the_between_and_within_launch_spread(between, within):
    rng = random.Random(7)
    comp = variance_components(launches(rng, 20_000, between, within, n=200, m=4))
    assert abs(comp.between_cv - between) < max(0.25 * between, 0.006)
    assert abs(comp.within_cv - within) < 0.15 * within
    assert abs(comp.mean - 20_000) / 20_000 < 0.03


def test_configs_of_different_speeds_pool_on_relative_values():
    rng = random.Random(3)
    floor = pooled_noise({"trial 5": launches(rng, 20_000, 0.05, 0.02, 60, 3),
                          "trial 7": launches(rng, 9_000, 0.05, 0.02, 60, 3)}, "128")
    assert abs(floor.between_cv - 0.05) < 0.015 and abs(floor.within_cv - 0.02) < 0.004
    assert (floor.launches, floor.repeats, floor.level) == (120, 3, "128")


def test_what_the_data_cannot_tell_stays_unknown():
    assert pooled_noise({"a": [[1.0], [1.1]]}).within_cv is None  # no launch with two repeats
    assert pooled_noise({"a": [[1.0, 1.1]]}).between_cv is None  # one launch
    assert pooled_noise({}).launches == 0


def test_repeats_go_where_the_variance_is():
    # launches agree, repeats do not: measure more in each launch (a repeat is cheap)
    assert best_repeats(NoiseFloor(0.005, 0.04, 4, 2), launch_s=90, repeat_s=15, most=5) == 5
    # launches differ: one repeat each, spend the time on fresh launches
    assert best_repeats(NoiseFloor(0.15, 0.03, 4, 2), launch_s=90, repeat_s=15, most=5) == 1
    assert best_repeats(NoiseFloor(0.03, 0.03, 4, 2), launch_s=90, repeat_s=15, most=5) == 2  # sqrt(6)
    assert best_repeats(NoiseFloor(None, 0.03, 1, 2), 90, 15, 5) == 1  # not known yet


def test_the_simulator_splits_its_noise_into_launch_run_and_step_parts():
    launches_ = [Jitter(0.0, seed, launch_noise=0.1).launch_factor for seed in range(400)]
    mean = sum(launches_) / len(launches_)
    spread = (sum((f - mean) ** 2 for f in launches_) / len(launches_)) ** 0.5
    assert 0.08 < spread < 0.12
    drift = Jitter(0.0, 1, launch_noise=0.0, run_noise=0.05, run_steps=10)
    factors = [drift.factor() for _ in range(100)]
    assert len(set(factors[:10])) == 1 and len(set(factors[::10])) > 5  # redrawn every 10 steps


def test_real_engines_measure_steady_levels_and_the_simulator_fixed_rounds():
    workload = Workload()
    assert get_engine("vllm").info.measure == "steady" and get_engine("sim").info.measure == "rounds"
    steady = workload.for_engine(get_engine("vllm").info.measure)
    assert steady.measure == "steady" and steady.precision == DEFAULT_STEADY_PRECISION == 0.01
    assert steady.max_seconds == 60.0 and Workload(precision=0.02).for_engine("steady").max_seconds is None
    assert workload.for_engine("rounds").precision is None
    assert Workload(precision=0.02).for_engine("rounds").measure == "steady"  # asked for: kept
    assert Workload(measure="rounds").for_engine("steady").measure == "rounds"
    with pytest.raises(ValueError, match="steady levels"):
        Workload(measure="rounds", precision=0.02)


def test_each_vllm_launch_compiles_into_a_cache_of_its_own_unless_the_user_names_one():
    from sweeper.spec.hosts import HostSpec
    from sweeper.spec.space import Space
    space = Space.model_validate({"name": "v", "engine": "vllm", "model": "/m", "parameters": EAGER})
    spec = VLLMEngine().build_launch_spec(space, {}, HostSpec(transport="local"), 8000, "python3")
    assert spec.env["VLLM_CACHE_ROOT"] == "vllm-cache"  # relative: the server runs in its trial's folder
    mine = Space.model_validate({"name": "v", "engine": "vllm", "model": "/m", "parameters": EAGER,
                                 "fixed_env": {"VLLM_CACHE_ROOT": "/shared/cache"}})
    assert VLLMEngine().build_launch_spec(mine, {}, HostSpec(transport="local"), 8000, "python3").env["VLLM_CACHE_ROOT"] == "/shared/cache"
