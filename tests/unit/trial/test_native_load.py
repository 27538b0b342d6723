"""workload.load: native: each level measured by the engine's own benchmark on the host, its JSON
read into the level record. The JSON is the real `vllm bench serve` 0.24.0 result from the H200
(tests/fixtures/vllm/vllm_bench_c4.json)."""

from sweeper.engines.vllm import VLLMEngine
from sweeper.hosts.base import CommandResult, ServerProcess
from sweeper.spec.space import Workload
from sweeper.trial.load_ladder import measure_native_levels
from sweeper.trial.native import native_level_runner
from tests.support.paths import FIXTURE_DIR

REAL = (FIXTURE_DIR / "vllm" / "vllm_bench_c4.json").read_text()


class BenchHost:
    def __init__(self):
        self.commands = []

    def python(self):
        return "/usr/bin/python3"

    def run(self, argv, env=None, timeout_s=120.0):
        self.commands.append(list(argv))
        if argv[0] == "cat":
            return CommandResult(tuple(argv), 0, REAL, "")
        return CommandResult(tuple(argv), 0, "", "")


def test_each_level_runs_vllm_bench_serve_greedy_and_reads_its_json(tmp_path):
    host = BenchHost()
    proc = ServerProcess(host="h", pid=1, pgid=1, start_ticks=1, token="t", log_path="/w/trials/3/server.log")
    workload = Workload(input_len=64, output_len=64, concurrency=[4], min_rounds=8, warmup_rounds=1, load="native")
    runner = native_level_runner(host, VLLMEngine(), proc, "http://127.0.0.1:31000", "/tmp/m", workload)
    levels, failure = measure_native_levels(workload.concurrency, runner, lambda c, m: None, lambda: True)
    assert failure is None
    assert levels[4]["output_throughput"] == levels[4]["output_throughput"] and levels[4]["valid"]
    assert abs(levels[4]["output_throughput"] - 1264.87) < 0.01 and levels[4]["load_from"] == "native"
    warm, measured = [c for c in host.commands if c[0] != "cat"]
    assert measured[:6] == ["/usr/bin/python3", "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend"]
    assert measured[measured.index("--num-prompts") + 1] == "32" and warm[warm.index("--num-prompts") + 1] == "4"
    assert measured[measured.index("--temperature") + 1] == "0"  # greedy, as sweeper's own client sends
    assert measured[measured.index("--result-dir") + 1] == "/w/trials/3"
    assert measured[measured.index("--result-filename") + 1] == "native_c4.json"
