"""Search space -> suggestions, constraints, canonical keys, enumeration."""

import optuna
import pytest

from sweeper.spec.space_file import parse_space
from sweeper.spec.expr import ExprError, parse_expr
from sweeper.search.configs import config_key, count_configs, enumerate_configs, is_active, suggest_config
from sweeper.spec.rules import violated_constraints

SPACE = parse_space("""\
name: t
engine: sim
model: m
parameters:
  tp_size: {type: categorical, choices: [2, 4, 8], flag: --tp-size}
  ep_size: {type: categorical, choices: [1, 2, 4, 8], flag: --ep-size}
  disable_cuda_graph: {type: bool, flag: --disable-cuda-graph}
  cuda_graph_max_bs: {type: categorical, choices: [8, 16], flag: --cuda-graph-max-bs, when: {disable_cuda_graph: false}}
  mem: {type: float, low: 0.6, high: 0.8, step: 0.1, flag: --mem-fraction-static}
  proto: {type: categorical, choices: [LL, Simple], env: NCCL_PROTO}
constraints:
  - ep_size <= tp_size
  - tp_size % ep_size == 0
  - cuda_graph_max_bs >= 16 or tp_size < 8
""", "inline")


def test_conditions_hide_parameters():
    assert is_active(SPACE, "cuda_graph_max_bs", {"disable_cuda_graph": False})
    assert not is_active(SPACE, "cuda_graph_max_bs", {"disable_cuda_graph": True})


def test_suggested_configs_respect_conditions():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(30):
        trial = study.ask()
        config = suggest_config(trial, SPACE)
        assert ("cuda_graph_max_bs" in config) == (config["disable_cuda_graph"] is False)
        assert min(abs(config["mem"] - v) for v in (0.6, 0.7, 0.8)) < 1e-9
        study.tell(trial, 0.0)


def test_constraints():
    base = {"tp_size": 8, "ep_size": 8, "disable_cuda_graph": False, "cuda_graph_max_bs": 16}
    assert violated_constraints(SPACE, base) == []
    assert violated_constraints(SPACE, {**base, "ep_size": 4, "tp_size": 2}) == ["ep_size <= tp_size", "tp_size % ep_size == 0"]
    assert violated_constraints(SPACE, {**base, "cuda_graph_max_bs": 8}) == ["cuda_graph_max_bs >= 16 or tp_size < 8"]
    # a constraint naming an inactive parameter does not apply
    no_graph = {"tp_size": 8, "ep_size": 8, "disable_cuda_graph": True}
    assert violated_constraints(SPACE, no_graph) == []


def test_config_key_is_order_independent():
    assert config_key({"a": 1, "b": "x"}) == config_key({"b": "x", "a": 1})
    assert config_key({"a": 1}) != config_key({"a": 2})


def test_enumeration_counts_conditional_branches_once():
    configs = list(enumerate_configs(SPACE))
    # 3 tp x 4 ep x (graph off + graph on x 2 bs) x 3 mem x 2 proto
    assert len(configs) == 3 * 4 * 3 * 3 * 2 == count_configs(SPACE)
    assert len({config_key(c) for c in configs}) == len(configs)


def test_unbounded_float_is_not_countable():
    space = parse_space("name: t\nengine: sim\nmodel: m\nparameters:\n  f: {type: float, low: 0, high: 1, flag: --f}\n", "x")
    assert count_configs(space) is None


@pytest.mark.parametrize("source, values, expected", [
    ("a * b <= 8", {"a": 2, "b": 4}, True),
    ("a * b <= 8", {"a": 4, "b": 4}, False),
    ("a in [1, 2] and not c", {"a": 2, "c": False}, True),
    ("name != 'deepep'", {"name": "deepep"}, False),
    ("1 < a <= 3", {"a": 3}, True),
    ("a // 2 + a % 2 == 2", {"a": 3}, True),
    ("-a < 0", {"a": 1}, True),
    ("(8 if a > 2 else 4) == 8", {"a": 3}, True),
])
def test_expressions(source, values, expected):
    assert parse_expr(source, set(values)).evaluate(values) is expected


@pytest.mark.parametrize("source", ["open('x')", "a.b", "[x for x in a]", "lambda: 1", "a[0]", "f(a)"])
def test_unsafe_expressions_refused(source):
    with pytest.raises(ExprError):
        parse_expr(source)


def test_division_by_zero_is_an_expression_error():
    with pytest.raises(ExprError):
        parse_expr("a % b == 0").evaluate({"a": 1, "b": 0})


RULED = parse_space("""\
name: t
engine: sim
model: m
parameters:
  tp_size: {type: categorical, choices: [4, 8], flag: --tp-size}
  moe: {type: categorical, choices: [marlin, triton], flag: --moe-runner-backend}
derived:
  ep_size: {expr: "tp_size if moe == 'marlin' else 1", flag: --ep-size}
rules:
  - forbid: "moe not in ['marlin', 'flashinfer_mxfp4']"
    reason: "FP4 experts need moe_runner_backend in [marlin, flashinfer_mxfp4]"
constraints:
  - ep_size <= tp_size
""", "inline")


def test_derived_parameters_are_computed_not_sampled():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(10):
        trial = study.ask()
        config = suggest_config(trial, RULED)
        assert "ep_size" not in trial.params
        assert config["ep_size"] == (config["tp_size"] if config["moe"] == "marlin" else 1)
        study.tell(trial, 0.0)
    assert {c["ep_size"] for c in enumerate_configs(RULED)} == {1, 4, 8}


def test_rules_exclude_with_their_reason():
    from sweeper.spec.rules import excluded_by_rule

    assert excluded_by_rule(RULED, {"tp_size": 8, "moe": "triton", "ep_size": 1}).startswith("FP4 experts need")
    assert excluded_by_rule(RULED, {"tp_size": 8, "moe": "marlin", "ep_size": 8}) is None


def test_derived_values_reach_the_launch_command():
    from sweeper.spec.hosts import HostSpec
    from sweeper.engines import get_engine

    config = {"tp_size": 4, "moe": "marlin", "ep_size": 4}
    spec = get_engine("sim").build_launch_spec(RULED, config, HostSpec(transport="local"), 1, "py")
    assert spec.argv[-2:] == ("--ep-size", "4")
