"""Search-space parameters: the sampled kinds (categorical, int, float, bool), derived values, and
whether a seed's value is one its parameter can take."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from sweeper.errors import did_you_mean
from sweeper.spec.loading import Strict

Scalar = Union[bool, int, float, str, None]


class BaseParam(Strict):
    """Where a value goes (exactly one of a CLI flag or an environment variable) and the `when`
    conditions under which it is set."""

    flag: str | None = Field(None, pattern=r"^-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*$")
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    when: dict[str, Scalar | list[Scalar]] = {}
    help: str = ""

    @model_validator(mode="after")
    def _one_target(self):
        if (self.flag is None) == (self.env is None):
            raise ValueError("give exactly one of 'flag' (a CLI flag) or 'env' (an environment variable)")
        return self


class CategoricalParam(BaseParam):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self):
        if len({json.dumps(c) for c in self.choices}) != len(self.choices):
            raise ValueError("choices must be unique")
        return self


class IntParam(BaseParam):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _range(self):
        _check_range(self.low, self.high, self.log, self.step != 1)
        return self


class FloatParam(BaseParam):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _range(self):
        _check_range(self.low, self.high, self.log, self.step is not None)
        return self


class BoolParam(BaseParam):
    """A bool mapped to a flag is the bare flag when true and absent when false; mapped to an
    environment variable it is "1" or "0"."""

    type: Literal["bool"]


def _check_range(low: float, high: float, log: bool, stepped: bool) -> None:
    if low >= high:
        raise ValueError(f"low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise ValueError("a log-scaled range needs low > 0")
    if log and stepped:
        raise ValueError("'log' and 'step' cannot be combined")


Param = Annotated[
    Union[CategoricalParam, IntParam, FloatParam, BoolParam], Field(discriminator="type")
]


class DerivedParam(BaseParam):
    """A value computed from the sampled parameters (never sampled itself), e.g. `ep_size: tp_size`."""

    expr: str


def seed_value_problem(param: "CategoricalParam | IntParam | FloatParam | BoolParam", value: Any) -> str | None:
    """Why a seed's value is not one its parameter can take (None: it is): a seed runs first and
    is the correctness reference, so a typo must stop the space from loading, not the sweep.
    Optuna refuses a categorical value outside the choices (it would crash the trial)."""
    if isinstance(param, CategoricalParam):
        if any(type(value) is type(c) and value == c or _same_number(value, c) for c in param.choices):
            return None
        shown = ", ".join(json.dumps(c) for c in param.choices)
        return f"{value!r} is not one of the choices ({shown})" + did_you_mean(value, param.choices)
    if isinstance(param, BoolParam):
        return None if isinstance(value, bool) else f"expected true or false (got {value!r})"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(param, IntParam) and not float(value).is_integer()):
        return f"expected {'an integer' if isinstance(param, IntParam) else 'a number'} (got {value!r})"
    return None  # a number outside the searched range is allowed: seeds probe failures there (vllm-h200.yaml)


def _same_number(value: Any, choice: Any) -> bool:
    """An int seed for a float choice (8 for 8.0) and back; never a bool for a number."""
    numbers = (int, float)
    return (isinstance(value, numbers) and isinstance(choice, numbers) and not isinstance(value, bool)
            and not isinstance(choice, bool) and value == choice)

