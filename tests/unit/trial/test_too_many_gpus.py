"""Issue 29 item 5, the pure parts: the GPUs a config needs (its space's `gpus:`, else the engine's
parallel sizes in its argv) against the GPUs its host entry states, as the preflight and `doctor`
judge them; a host entry without `gpus:` refuses nothing."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeper.engines import get_engine
from sweeper.engines.adapter import config_gpus, gpus_beyond_host
from sweeper.fleet.workers import decide_claim
from sweeper.hosts.local import LocalHost
from sweeper.outcomes import FailureKind, Stage
from sweeper.workflows.doctor_checks import check_space_gpus, most_gpus, seed_commands
from sweeper.study.store import stored_host_spec
from sweeper.study.warm import build_warm_start
from sweeper.spec.hosts import HostSpec, load_hosts
from sweeper.spec.space_file import parse_space
from sweeper.trial.launch import preflight

VLLM = get_engine("vllm")
SGLANG = get_engine("sglang")

VLLM_SPACE = parse_space("""\
name: v
engine: vllm
model: m
parameters:
  tp: {type: categorical, choices: [1, 2, 4], flag: --tensor-parallel-size}
  dp: {type: categorical, choices: [1, 2], flag: --data-parallel-size}
  ep: {type: bool, flag: --enable-expert-parallel}
constraints: ["tp * dp <= 4"]
seeds:
  - {name: tp1, params: {tp: 1, dp: 1, ep: false}}
  - {name: tp2, params: {tp: 2, dp: 1, ep: true}}
""", "inline")


def argv_of(engine, space, config, spec=HostSpec(transport="local")) -> tuple[str, ...]:
    return engine.build_launch_spec(space, config, spec, 31000, "python").argv


def needs(engine, space, config) -> int | None:
    return config_gpus(space, engine.info, config, argv_of(engine, space, config))


def test_a_vllm_config_needs_tp_times_dp_and_expert_parallelism_adds_none():
    assert needs(VLLM, VLLM_SPACE, {"tp": 2, "dp": 1, "ep": True}) == 2
    assert needs(VLLM, VLLM_SPACE, {"tp": 2, "dp": 2, "ep": False}) == 4


def test_an_sglang_config_needs_tp_times_dp_times_pp_and_its_ep_size_adds_none():
    space = parse_space("""\
name: s
engine: sglang
model: m
fixed_flags: {--pp-size: 2}
parameters:
  tp: {type: categorical, choices: [1, 2], flag: --tp-size}
  ep: {type: categorical, choices: [1, 2], flag: --ep-size}
""", "inline")
    assert needs(SGLANG, space, {"tp": 2, "ep": 2}) == 4


def test_the_spaces_own_gpus_expression_wins_over_the_flags():
    space = VLLM_SPACE.model_copy(update={"gpus": "tp * dp * 2"})
    assert needs(VLLM, space, {"tp": 2, "dp": 1, "ep": False}) == 4


def test_more_gpus_than_the_host_states_is_refused_and_says_by_how_much():
    assert gpus_beyond_host(2, "local", 1) == "needs 2 GPUs, host local has 1"
    assert gpus_beyond_host(2, "local", 2) is None
    assert gpus_beyond_host(2, "local", None) is None  # the host entry does not say
    assert gpus_beyond_host(None, "local", 1) is None  # the engine does not say (llama.cpp)


def test_a_host_entry_without_gpus_states_none_and_a_resumed_study_keeps_it_so(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  bare: {transport: local}\n  one: {transport: local, gpus: 1}\n")
    hosts = load_hosts(path).hosts
    assert hosts["bare"].declared_gpus is None and hosts["bare"].gpus == 8  # the gate keeps its default
    assert hosts["one"].declared_gpus == 1
    # the study stores the entry; `resume` validates it back
    assert HostSpec.model_validate(stored_host_spec(hosts["bare"])).declared_gpus is None
    assert HostSpec.model_validate(stored_host_spec(hosts["one"])).declared_gpus == 1


def test_preflight_refuses_a_config_too_big_for_the_host_before_looking_for_a_port():
    host = LocalHost("local", HostSpec(transport="local", gpus=1, gpu_gate="off"))
    try:
        failure = preflight(VLLM_SPACE, {"tp": 2, "dp": 1, "ep": False}, host, 31000, needs_gpus=2, host_gpus=1)
        assert (failure.stage, failure.kind) == (Stage.PREFLIGHT, FailureKind.TOO_MANY_GPUS)
        assert failure.message == "needs 2 GPUs, host local has 1"
        # a broken constraint is still named first: the space's own rules come before the host
        broken = preflight(VLLM_SPACE, {"tp": 4, "dp": 2, "ep": False}, host, 31000, needs_gpus=8, host_gpus=1)
        assert broken.kind == FailureKind.CONSTRAINT
        assert isinstance(preflight(VLLM_SPACE, {"tp": 1, "dp": 1, "ep": False}, host, 31000,
                                    needs_gpus=1, host_gpus=1), int)  # a base port: it may launch
    finally:
        host.close()


def test_doctor_flags_a_seed_the_host_cannot_run():
    spec = HostSpec(transport="local", gpus=1)
    checks = {c.name: c for c in seed_commands(VLLM, VLLM_SPACE, "local", spec, "python")}
    assert checks["seed tp1"].ok
    assert not checks["seed tp2"].ok
    assert checks["seed tp2"].detail.startswith("needs 2 GPUs, host local has 1: ")
    assert "--tensor-parallel-size 2" in checks["seed tp2"].detail
    unstated = {c.name: c for c in seed_commands(VLLM, VLLM_SPACE, "local", HostSpec(transport="local"), "python")}
    assert unstated["seed tp2"].ok


def test_doctor_warns_when_the_spaces_ranges_allow_configs_larger_than_the_host():
    assert most_gpus(VLLM_SPACE, VLLM) == (4, {"tp": 2, "dp": 2})  # tp 4 x dp 2 breaks the constraint
    small = check_space_gpus(VLLM, VLLM_SPACE, "local", HostSpec(transport="local", gpus=2))
    assert small.ok and small.warning and "(tp=2, dp=2 needs 4 GPUs, host local has 2)" in small.detail
    big = check_space_gpus(VLLM, VLLM_SPACE, "local", HostSpec(transport="local", gpus=4))
    assert big.ok and not big.warning and big.detail == "every config fits: at most 4 GPUs, host local has 4"


DIST = {"x": CategoricalDistribution([1, 2])}


def finished(number: int, host: str, **attrs) -> optuna.trial.FrozenTrial:
    trial = create_trial(state=TrialState.COMPLETE, params={"x": 2}, distributions=DIST, value=0.0,
                         user_attrs={"config_key": "k", "host": host, **attrs})
    trial.number = number
    return trial


def test_many_hosts_a_config_refused_on_a_smaller_host_runs_on_a_bigger_one():
    refused = finished(0, "small", launched=False,
                       failure={"stage": "preflight", "kind": "too_many_gpus", "message": "needs 2 GPUs, host small has 1"})
    assert decide_claim([refused], 5, "k", budget=10, host="big") == ("run", None)
    assert decide_claim([refused], 5, "k", budget=10, host="small") == ("duplicate", refused)  # free there
    crashed = finished(1, "small", launched=True, failure={"stage": "wait_ready", "kind": "crash", "message": ""})
    assert decide_claim([crashed], 5, "k", budget=10, host="big") == ("duplicate", crashed)


def test_a_warm_start_does_not_carry_a_config_too_big_for_the_earlier_host_as_broken():
    text = """\
name: w
engine: sim
model: m
parameters:
  x: {type: categorical, choices: [1, 2], flag: --tp-size}
"""
    space = parse_space(text, "inline")
    earlier = optuna.create_study(study_name="small-host")
    earlier.set_user_attr("space_text", text)
    failures = {2: {"stage": "preflight", "kind": "too_many_gpus", "message": "needs 2 GPUs, host small has 1"},
                1: {"stage": "wait_ready", "kind": "crash", "message": "died"}}
    for x, failure in failures.items():  # recorded as the sweep records a failed trial
        earlier.enqueue_trial({"x": x})
        trial = earlier.ask({"x": DIST["x"]})
        trial.set_user_attr("failure", failure)
        trial.set_constraint("config_fault", 1.0)
        earlier.tell(trial, 0.0)
    broken = build_warm_start(space, [earlier]).broken
    assert list(broken) == ['{"x":1}']  # the crash is the config's; the size was the host's
