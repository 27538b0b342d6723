"""Loading YAML into the typed models: errors that name the file, the line and the key path in one line."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sweeper.errors import ConfigError
from sweeper.spec.yamlfile import KeyPath, format_path, line_of, load_yaml_with_lines


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _switch_words(cls, data: Any) -> Any:
        """YAML 1.1 reads an unquoted on/off/yes/no/true/false as a bool: for an enum key whose
        words are on and off (a switch) the meaning is plain. Any other enum key refuses the bool
        with a hint to quote (_message)."""
        if not isinstance(data, dict):
            return data
        switches = {k: "on" if v else "off" for k, v in data.items() if isinstance(v, bool) and k in cls.model_fields
                    and {"on", "off"} <= set(literal_words(cls.model_fields[k].annotation))}
        return {**data, **switches} if switches else data


def literal_words(annotation: Any) -> tuple[str, ...]:
    """The words of a Literal of strings (also inside `Literal[...] | None`); () for any other type."""
    if get_origin(annotation) is Literal:
        args = get_args(annotation)
        return args if all(isinstance(a, str) for a in args) else ()
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(w for part in get_args(annotation) for w in literal_words(part))
    return ()


def read_mapping(path: Path) -> tuple[Any, dict]:
    data, lines = load_yaml_with_lines(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "expected a mapping at the top level")
    return data, lines


def load_model(path: Path, model: type[BaseModel]):
    data, lines = read_mapping(path)
    return validate_model(path, data, lines, model)


def validate_model(source: Path | str, data: Any, lines: dict, model: type[BaseModel]):
    """The validated model, or one ConfigError listing every problem pydantic found."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors, seen = [], set()
        for error in exc.errors():
            loc = _strip_union_tags(error["loc"], data)
            if loc not in seen:  # a union reports each alternative's complaint about one key
                seen.add(loc)
                errors.append(ConfigError(str(source), format_path(loc), _message(error), line_of(lines, loc)))
        raise ConfigError.all_of(sorted(errors, key=lambda e: e.line or 0)) from None


def _message(error: dict) -> str:
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if "input" in error and error["type"] not in ("missing",) and not isinstance(error["input"], dict):
        message += f" (got {error['input']!r})"
    if error["type"] == "literal_error" and isinstance(error.get("input"), bool):
        message += ": YAML reads an unquoted on/off/yes/no/true/false as a boolean; quote the word"
    return message


def _strip_union_tags(loc: tuple, data: Any) -> KeyPath:
    """pydantic puts the discriminator tag ('int', 'categorical') into error paths; drop it."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(part, str) and isinstance(node, dict) and node.get("type") == part:
            continue
        elif isinstance(part, str) and "[" in part:  # e.g. 'function-after[_range(), IntParam]'
            continue
        out.append(part)
    return tuple(out)
