"""What a space is checked against before any engine code loads: the request API each engine's server speaks
and the flags whose sizes multiply into a config's GPU count. The adapters (sweeper/engines/) take these from
here, so each fact is written once, below both the space checks and the engines that launch."""

from __future__ import annotations

# the API an engine's server is sent requests on, where it is not the OpenAI completions one
REQUEST_API: dict[str, str] = {"transformers": "chat"}

# each parallel size's spellings; an engine missing here declares none (llama.cpp, transformers)
_SGLANG_PARALLEL = (("--tp-size", "--tensor-parallel-size"), ("--dp-size", "--data-parallel-size"),
                    ("--pp-size", "--pipeline-parallel-size"))
PARALLEL_FLAGS: dict[str, tuple[tuple[str, ...], ...]] = {
    # server_args.py: expert parallelism (--ep-size) splits the TP group, it adds no GPUs
    "sglang": _SGLANG_PARALLEL,
    "sim": _SGLANG_PARALLEL,  # the simulator speaks sglang's flags (engines/simulator.py)
    "vllm": (("--tensor-parallel-size", "-tp"), ("--data-parallel-size", "-dp"),
             ("--pipeline-parallel-size", "-pp")),
}


def request_api(engine: str) -> str:
    """The API `engine`'s server is sent requests on: chat, or completions."""
    return REQUEST_API.get(engine, "completions")
