"""Issue 21's CPU half: the multi-GPU vLLM space proven without a second GPU. Every config's argv
against the real vLLM 0.24.0 `serve --help=all` captured on the H200; NVLink multicast left off in
every server's environment; two small configs side by side on separate GPU sets."""


from sweeper.engines.flags import flag_problems, parse_help_flags
from sweeper.engines.vllm import VLLMEngine
from sweeper.fleet.workers import gpu_count_of, slot_host_spec, slot_plan
from sweeper.search.configs import enumerate_configs
from sweeper.spec.hosts import HostSpec
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space_file import load_space
from tests.support.paths import ROOT

SPACE = load_space(ROOT / "search_spaces" / "vllm-h200-multi.yaml")
HELP = parse_help_flags((ROOT / "tests" / "fixtures" / "help" / "vllm-0.24.0.txt").read_text())
HOST = HostSpec(transport="local", gpus=4, gpu_sets=["0,1", "2,3"],
                env={"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"})


def launchable() -> list[dict]:
    return [c for c in enumerate_configs(SPACE)
            if not excluded_by_rule(SPACE, c) and not violated_constraints(SPACE, c)]


def test_every_parallel_config_is_accepted_by_the_installed_vllm():
    configs = launchable()
    assert len(configs) > 100 and {c["tensor_parallel_size"] * c["data_parallel_size"] for c in configs} == {1, 2, 4}
    engine = VLLMEngine()
    for config in configs:
        spec = engine.build_launch_spec(SPACE, config, HOST, 31000, "python3")
        assert flag_problems(spec.argv, HELP, engine.checks_short_flags, engine.flag_family) == [], config


def test_nvlink_multicast_stays_off_whatever_the_config():
    for config in launchable():
        env = VLLMEngine().build_launch_spec(SPACE, config, HOST, 31000, "python3").env
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_PROTO"] == config["nccl_proto"]


def test_two_gpu_configs_run_side_by_side_on_their_own_gpu_sets():
    tp2 = next(c for c in launchable() if c["tensor_parallel_size"] == 2 and c["data_parallel_size"] == 1)
    tp4 = next(c for c in launchable() if c["tensor_parallel_size"] == 4)
    assert gpu_count_of(SPACE, tp2) == 2 and gpu_count_of(SPACE, tp4) == 4
    first = slot_plan("box", HOST, "0,1", gpu_count_of(SPACE, tp2))
    second = slot_plan("box", HOST, "2,3", gpu_count_of(SPACE, tp2))
    assert first[1] == "0,1" and second[1] == "2,3" and set(first[0]).isdisjoint(second[0])
    assert slot_host_spec(HOST, "2,3", second[1]).env["CUDA_VISIBLE_DEVICES"] == "2,3"
    whole = slot_plan("box", HOST, "0,1", gpu_count_of(SPACE, tp4))
    assert whole[1] == "0,1,2,3" and len(whole[0]) == 2  # TP4 takes both slots' leases
