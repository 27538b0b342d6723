"""Engine adapters by name."""

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
