"""The embedded simulator: started like SGLang (`python -m sweeper.sim` takes SGLang's flags),
with the same readiness and failure lines. Its `--time-scale` makes modelled time run faster;
measurements are divided by it so they read in modelled (real-GPU) time."""

from __future__ import annotations

from dataclasses import replace

from sweeper.spec.space import Space
from sweeper.engines.sglang import SGLANG_INFO, SGLangEngine

TIME_SCALE_FLAG = "--time-scale"


class SimEngine(SGLangEngine):
    info = replace(SGLANG_INFO, name="sim", measure="rounds")
    module = "sweeper.sim"
    distribution = "sweeper"

    def clock_scale(self, space: Space) -> float:
        return float(space.fixed_flags.get(TIME_SCALE_FLAG) or 1.0)
