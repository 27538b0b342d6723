"""Engine adapters by name: each turns a config into a LaunchSpec (argv, env), and holds its
readiness paths, failure signatures and request dialect as data. The adapters are pure (no I/O);
installed.py asks the host what is installed.

- adapter.py       the Engine protocol, EngineAdapter (its common half), LaunchSpec, Signature, build_env
- sglang.py        SGLang's adapter
- vllm.py          vLLM's adapter
- transformers.py  `transformers serve`'s adapter
- llamacpp.py      llama.cpp's llama-server adapter
- simulator.py     the embedded simulator's adapter (SGLang's flags and lines)
- flags.py         the installed engine's flags, read from its --help, checked before a launch
- installed.py     the installed engine read over a host: its version, its --help flags, a config's argv problems
- versions.py      how flags changed between releases (data), so a refused flag names its replacement
"""

from sweeper.engines.adapter import Engine
from sweeper.engines.llamacpp import LlamaCppEngine
from sweeper.engines.sglang import SGLangEngine
from sweeper.engines.simulator import SimEngine
from sweeper.engines.transformers import TransformersEngine
from sweeper.engines.vllm import VLLMEngine

__all__ = ["ENGINES", "Engine", "LlamaCppEngine", "SGLangEngine", "SimEngine", "TransformersEngine", "VLLMEngine",
           "get_engine"]

ENGINES: dict[str, type] = {"sglang": SGLangEngine, "sim": SimEngine, "llamacpp": LlamaCppEngine,
                            "transformers": TransformersEngine, "vllm": VLLMEngine}


def get_engine(name: str) -> Engine:
    return ENGINES[name]()
