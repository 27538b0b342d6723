"""Per-GPU and per-user tok/s as objectives: a space whose per-GPU objective cannot be scored (an
engine that does not say its GPUs, and no `gpus:`) is refused when it loads; the count comes from
the space's `gpus:` expression before the engine's argv; and a study ranked by tok/s per GPU lets
a config on fewer GPUs win, through the real launch argv, level fields, objective and ranking."""

from __future__ import annotations

import optuna
import pytest

from sweeper.engines import get_engine
from sweeper.errors import ConfigError
from sweeper.results.ranking import ranked_frame
from sweeper.study.record import constraint_values, objective_value, outcome_attrs
from sweeper.study.trials import best_trial
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.trial.load_ladder import per_gpu_fields
from sweeper.engines.adapter import config_gpus
from sweeper.trial.context import TrialOutcome

HOST = HostSpec(transport="local")


def space_text(engine: str, objective: str, extra: str = "") -> str:
    return (f"name: t\nengine: {engine}\nmodel: m\nparameters:\n"
            "  tp: {type: categorical, choices: [2, 8], flag: --tp-size}\n"
            "  dp: {type: categorical, choices: [1, 4], flag: --dp-size}\n"
            f"workload: {{concurrency: [1, 16]}}\n{objective}\n{extra}")


@pytest.mark.parametrize("engine", ["llamacpp", "transformers"])
def test_a_per_gpu_objective_where_the_gpus_cannot_be_known_is_refused_at_load(engine):
    with pytest.raises(ConfigError) as raised:
        parse_space(space_text(engine, "objective: {metric: output_throughput_per_gpu}"), "s.yaml")
    message = str(raised.value)
    assert message.startswith("s.yaml:8: objective.metric: output_throughput_per_gpu needs the GPUs each config "
                              f"runs on, and {engine} does not say") and "add gpus: to the space" in message
    assert len(message.splitlines()) == 1
    pareto = "objectives: [{metric: output_throughput_per_gpu}, {metric: p99_ttft_ms}]"
    with pytest.raises(ConfigError, match=r"s\.yaml:8: objectives\[0\]\.metric: output_throughput_per_gpu needs"):
        parse_space(space_text(engine, pareto), "s.yaml")
    with pytest.raises(ConfigError, match=r"s\.yaml:9: target\.metric: output_throughput_per_gpu needs"):
        parse_space(space_text(engine, "", "target: {metric: output_throughput_per_gpu, value: 10}\n"), "s.yaml")
    # with `gpus:` it loads; per user needs no GPU count; SGLang, vLLM and the simulator say theirs
    assert parse_space(space_text(engine, "objective: {metric: output_throughput_per_gpu}", 'gpus: "1"\n'),
                       "s.yaml").gpus == "1"
    parse_space(space_text(engine, "objective: {metric: output_throughput_per_user}"), "s.yaml")
    for counted in ("sglang", "vllm", "sim"):
        parse_space(space_text(counted, "objective: {metric: output_throughput_per_gpu}"), "s.yaml")


def test_the_gpus_expression_counts_before_the_engines_argv():
    config = {"tp": 4, "dp": 4}  # SGLang DP attention: the DP ranks share the TP group's GPUs
    engine = get_engine("sglang")
    for extra, gpus in (("", 16), ('gpus: "tp"\n', 4)):
        space = parse_space(space_text("sglang", "objective: {metric: output_throughput_per_gpu}", extra), "s.yaml")
        argv = engine.build_launch_spec(space, config, HOST, 1, "py").argv
        assert config_gpus(space, engine.info, config, argv) == gpus
    llamacpp = get_engine("llamacpp")
    space = parse_space(space_text("llamacpp", "objective: {metric: output_throughput_per_gpu}", 'gpus: "tp // 2"\n'),
                        "s.yaml")
    argv = llamacpp.build_launch_spec(space, config, HOST, 1, "py").argv
    assert config_gpus(space, llamacpp.info, config, argv) == 2
    assert per_gpu_fields({"output_throughput": 300.0}, 2) == {"gpus": 2, "output_throughput_per_gpu": 150.0}


def level(tok_s: float, gpus: int) -> dict:
    metrics = {"output_throughput": tok_s, "output_throughput_per_user": 20.0, "median_ttft_ms": 50.0,
               "p99_ttft_ms": 80.0, "median_itl_ms": 40.0, "p99_itl_ms": 60.0, "valid": True}
    return {**metrics, **per_gpu_fields(metrics, gpus)}


def test_a_study_ranked_by_tok_s_per_gpu_lets_fewer_gpus_win():
    engine = get_engine("sim")
    for objective, winner in (("output_throughput_per_gpu", {"tp": 2, "dp": 1}),
                              ("output_throughput", {"tp": 8, "dp": 1})):
        space = parse_space(space_text("sim", f"objective: {{metric: {objective}, level: 16}}"), "s.yaml")
        study = optuna.create_study(direction="maximize")
        study.set_user_attr("space", space.model_dump(mode="json"))
        for config, tok_s in (({"tp": 8, "dp": 1}, 800.0), ({"tp": 2, "dp": 1}, 400.0)):
            gpus = config_gpus(space, engine.info, config, engine.build_launch_spec(space, config, HOST, 1, "py").argv)
            outcome = TrialOutcome(config, levels={1: level(tok_s / 8, gpus), 16: level(tok_s, gpus)}, launched=True)
            study.enqueue_trial(config)
            trial = study.ask({name: optuna.distributions.CategoricalDistribution(choices)
                               for name, choices in (("tp", [2, 8]), ("dp", [1, 4]))})
            for key, value in outcome_attrs(outcome).items():
                trial.set_user_attr(key, value)
            for key, value in constraint_values(outcome, space).items():
                trial.set_constraint(key, value)
            study.tell(trial, objective_value(space, outcome))
        assert best_trial(study).params == winner, objective
        top = ranked_frame(study).iloc[0]
        assert top["param_tp"] == winner["tp"] and top["rank"] == 1
    assert top["rank_value"] == 800.0  # by absolute tok/s the 8-GPU config wins; per GPU (200 vs 100) it lost
