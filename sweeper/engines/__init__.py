"""Engine adapters by name: each turns a config into a LaunchSpec (argv, env), and holds its
readiness paths, failure signatures and request dialect as data. Pure: no I/O.

- base.py          the Engine protocol, EngineAdapter (its common half), LaunchSpec, Signature, build_env
- sglang.py, vllm.py, transformers.py, llamacpp.py, sim.py   one adapter each
- flags.py         the installed engine's flags, read from its --help, checked before a launch
- versions.py      how flags changed between releases (data), so a refused flag names its replacement
"""

from sweeper.engines.base import Engine
from sweeper.engines.llamacpp import LlamaCppEngine
from sweeper.engines.sglang import SGLangEngine
from sweeper.engines.sim import SimEngine
from sweeper.engines.transformers import TransformersEngine
from sweeper.engines.vllm import VLLMEngine

ENGINES: dict[str, type] = {"sglang": SGLangEngine, "sim": SimEngine, "llamacpp": LlamaCppEngine,
                            "transformers": TransformersEngine, "vllm": VLLMEngine}


def get_engine(name: str) -> Engine:
    return ENGINES[name]()
