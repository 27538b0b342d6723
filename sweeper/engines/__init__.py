"""Engine adapters by name."""

from sweeper.engines.base import Engine
from sweeper.engines.llamacpp import LlamaCppEngine
from sweeper.engines.sglang import SGLangEngine
from sweeper.engines.sim import SimEngine
from sweeper.engines.transformers import TransformersEngine

ENGINES: dict[str, type] = {"sglang": SGLangEngine, "sim": SimEngine, "llamacpp": LlamaCppEngine,
                            "transformers": TransformersEngine}


def get_engine(name: str) -> Engine:
    return ENGINES[name]()
