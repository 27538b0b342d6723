"""`workload.load: native`: each level measured by the engine's own benchmark (e.g. `vllm bench
serve`) run on the host against the launched server, its JSON read into a level record
(loadgen/native_results.py), so a user can compare with the tool their engine ships."""

from __future__ import annotations

import posixpath
from typing import Callable

from sweeper.engines.adapter import Engine
from sweeper.hosts.base import Host, ServerProcess
from sweeper.loadgen.native_results import parse_vllm_result
from sweeper.spec.space import Workload


def native_level_runner(host: Host, engine: Engine, proc: ServerProcess, base_url: str, model: str,
                        workload: Workload) -> Callable[[int], dict]:
    """One level: a warm-up run (discarded), then the measured run, its JSON written beside the
    server's log and read back."""
    folder = posixpath.dirname(proc.log_path)

    def run(concurrency: int, requests: int, tag: str) -> dict:
        result_file = posixpath.join(folder, f"native_c{concurrency}{tag}.json")
        argv = engine.native_bench_argv(host.python(), base_url, model, workload.typical_input_len, workload.typical_output_len,
                                        requests, concurrency, workload.seed + concurrency, result_file)
        if argv is None:
            return native_invalid(concurrency, f"{engine.info.name} has no native benchmark (workload.load: native)")
        done = host.run(argv, timeout_s=workload.request_timeout_s + 600)
        text = host.run(["cat", result_file], timeout_s=60)
        if done.returncode != 0 or text.returncode != 0:
            return native_invalid(concurrency, f"the engine's benchmark failed: {done.describe()[-300:]}")
        return parse_vllm_result(text.stdout)

    def level(concurrency: int) -> dict:
        if workload.warmup_rounds:
            run(concurrency, workload.warmup_rounds * concurrency, ".warmup")
        record = run(concurrency, max(workload.requests_per_level, workload.min_rounds * concurrency), "")
        return {**record, "max_concurrent_requests": concurrency, "load_from": "native"}
    return level


def native_invalid(concurrency: int, reason: str) -> dict:
    return {"completed": 0, "failed": 0, "output_throughput": float("nan"), "max_concurrency": concurrency,
            "valid": False, "invalid_reasons": [reason]}
