"""A family of response surfaces over a space's levers, for measuring the search on landscapes it
was never tuned for (issue 20). Each surface is pure and seeded: `value(config)` is the true
objective (None = the config crashes), and `measure(config, rng)` adds the evaluation's noise.
They differ from the simulator's model and from each other on purpose:

- needle: weak main effects; a hidden config whose neighbourhood rises steeply (few within 2%).
- interactions: two pairs and one triple of levers that pay only together.
- crash_island: most configs crash; a feasible island defined by three levers, sloped inside.
- plateau: most configs tie on a flat plateau; a ramp off it leads to a small peak.
- sim: the simulator's own performance model and failure rules.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from sweeper.spec.space import Space
from sweeper.search.configs import Config, enumerate_configs, parameter_values
from sweeper.spec.rules import excluded_by_rule, violated_constraints

Value = Callable[[Config], float | None]


@dataclass(frozen=True)
class Surface:
    name: str
    value: Value
    noise: float  # relative standard deviation of one evaluation

    def measure(self, config: Config, rng: random.Random) -> float | None:
        true = self.value(config)
        return None if true is None else true * max(0.0, 1 + rng.gauss(0, self.noise))


def _positions(space: Space) -> dict[str, dict]:
    """Each lever's values mapped to 0..1 (their order in the space)."""
    out = {}
    for name, param in space.parameters.items():
        values = parameter_values(param)
        out[name] = {v: i / max(1, len(values) - 1) for i, v in enumerate(values)}
    return out


def _at(config: Config, pos: dict[str, dict], name: str) -> float:
    """A lever's position in 0..1; an inactive lever sits at 0.5."""
    return pos[name].get(config[name], 0.5) if name in config else 0.5


class _Maker:
    """Seeded ingredients: random lever choices, main effects, hidden targets."""

    def __init__(self, space: Space, seed: int):
        self.rng = random.Random(seed)
        self.pos = _positions(space)
        self.names = list(space.parameters)
        self.target = {n: self.rng.choice(list(self.pos[n])) for n in self.names}
        self.weights = {n: self.rng.uniform(-1, 1) for n in self.names}

    def main(self, config: Config, scale: float) -> float:
        return scale * sum(w * (_at(config, self.pos, n) - 0.5) for n, w in self.weights.items())

    def closeness(self, config: Config, name: str) -> float:
        """1 at the hidden target value, falling with distance along the lever's order."""
        return 1 - abs(_at(config, self.pos, name) - self.pos[name][self.target[name]])

    def levers(self, k: int) -> list[str]:
        return self.rng.sample(self.names, k)


def needle(space: Space, seed: int = 1, noise: float = 0.03) -> Surface:
    m = _Maker(space, seed)
    levers = m.levers(6)

    def value(config: Config) -> float:
        near = sum(m.closeness(config, n) ** 2 for n in levers) / len(levers)
        return 10 * (1 + m.main(config, 0.05) + 1.5 * near ** 3)
    return Surface("needle", value, noise)


def interactions(space: Space, seed: int = 2, noise: float = 0.03) -> Surface:
    m = _Maker(space, seed)
    pair_a, pair_b, triple = m.levers(2), m.levers(2), m.levers(3)

    def value(config: Config) -> float:
        c = {n: m.closeness(config, n) ** 2 for n in set(pair_a + pair_b + triple)}
        together = (0.5 * c[pair_a[0]] * c[pair_a[1]] - 0.15 * (c[pair_a[0]] + c[pair_a[1]]) / 2
                    + 0.4 * c[pair_b[0]] * c[pair_b[1]] - 0.1 * (c[pair_b[0]] + c[pair_b[1]]) / 2
                    + 0.6 * c[triple[0]] * c[triple[1]] * c[triple[2]])
        return 20 * (1 + m.main(config, 0.1) + together)
    return Surface("interactions", value, noise)


def crash_island(space: Space, seed: int = 3, noise: float = 0.04) -> Surface:
    m = _Maker(space, seed)
    walls = m.levers(3)

    def value(config: Config) -> float | None:
        if any(m.closeness(config, n) < 0.6 for n in walls):
            return None
        return 5 * (1 + m.main(config, 0.3) + sum(m.closeness(config, n) for n in m.names) / len(m.names))
    return Surface("crash_island", value, noise)


def plateau(space: Space, seed: int = 4, noise: float = 0.02) -> Surface:
    m = _Maker(space, seed)
    ramp = m.levers(4)

    def value(config: Config) -> float:
        height = sum(m.closeness(config, n) for n in ramp) / len(ramp)
        return 100 * (1 + max(0.0, height - 0.7) * 1.5 + 0.002 * m.main(config, 1))
    return Surface("plateau", value, noise)


def sim(space: Space, noise: float = 0.03) -> Surface:
    from sweeper.sim.best import modelled_objective
    return Surface("sim", lambda config: modelled_objective(space, config), noise)


FAMILY = {"needle": needle, "interactions": interactions, "crash_island": crash_island,
          "plateau": plateau, "sim": sim}


def family(space: Space, names: list[str] | None = None) -> list[Surface]:
    return [FAMILY[n](space) for n in names or FAMILY if n != "sim" or space.engine == "sim"]


def optimum(space: Space, surface: Surface) -> tuple[float, int, int]:
    """(the best true value, configs within 2% of it, allowed configs) over the whole space."""
    values = [surface.value(c) for c in enumerate_configs(space)
              if not excluded_by_rule(space, c) and not violated_constraints(space, c)]
    feasible = [v for v in values if v is not None]
    best = max(feasible)
    return best, sum(v >= 0.98 * best for v in feasible), len(values)
