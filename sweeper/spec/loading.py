"""Loading YAML into the typed models: errors that name the file, the line and the key path in one line."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sweeper.errors import ConfigError, did_you_mean
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


def read_mapping(path: Path, duplicates: list[ConfigError] | None = None) -> tuple[Any, dict]:
    data, lines = load_yaml_with_lines(path, duplicates)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "expected a mapping at the top level")
    return data, lines


def load_model(path: Path, model: type[BaseModel]):
    duplicates: list[ConfigError] = []
    data, lines = read_mapping(path, duplicates)
    validated = validate_model(path, data, lines, model, duplicates)
    if duplicates:
        raise ConfigError.all_of(duplicates)
    return validated


def validate_model(source: Path | str, data: Any, lines: dict, model: type[BaseModel],
                   found: list[ConfigError] = ()):
    """The validated model, or one ConfigError listing every problem pydantic found (and those
    `found` before it, duplicate keys: every problem of a file at once)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors, seen = list(found), set()
        for error in exc.errors():
            loc = _strip_union_tags(error["loc"], data)
            if loc not in seen:  # a union reports each alternative's complaint about one key
                seen.add(loc)
                message = _message(error) + _suggestion(error, model)
                errors.append(ConfigError(str(source), format_path(loc), message, line_of(lines, loc)))
        raise ConfigError.all_of(sorted(errors, key=lambda e: e.line or 0)) from None


# pydantic's wording, in the words of a config file
_PLAIN = {"missing": "required key missing", "int_parsing": "expected an integer", "int_type": "expected an integer",
          "int_from_float": "expected a whole number", "float_parsing": "expected a number",
          "float_type": "expected a number", "bool_parsing": "expected true or false",
          "bool_type": "expected true or false", "string_type": "expected text (quote it)",
          "list_type": "expected a list", "dict_type": "expected a mapping", "model_type": "expected a mapping",
          "model_attributes_type": "expected a mapping"}
_BOUNDS = {"greater_than": "must be above {gt}", "greater_than_equal": "must be at least {ge}",
           "less_than": "must be below {lt}", "less_than_equal": "must be at most {le}",
           "literal_error": "expected one of {expected}", "string_pattern_mismatch": "must match {pattern}"}


def _message(error: dict) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "union_tag_invalid":
        return (f"{ctx.get('tag')!r} is not a {ctx.get('discriminator', 'type').strip(chr(39))}: expected one of "
                f"{ctx.get('expected_tags')}")
    if kind in ("too_short", "too_long"):
        count = ctx.get("min_length" if kind == "too_short" else "max_length")
        message = f"{'needs at least' if kind == 'too_short' else 'takes at most'} {count} item{'' if count == 1 else 's'}"
    elif kind in _PLAIN:
        message = _PLAIN[kind]
    elif kind in _BOUNDS:
        message = _BOUNDS[kind].format(**ctx)
    else:
        message = error["msg"].removeprefix("Value error, ")
    if "input" in error and kind != "missing" and not isinstance(error["input"], dict):
        message += f" (got {error['input']!r})"
    if kind == "literal_error" and isinstance(error.get("input"), bool):
        message += ": YAML reads an unquoted on/off/yes/no/true/false as a boolean; quote the word"
    return message


def _suggestion(error: dict, model: type[BaseModel]) -> str:
    """A did-you-mean for an unknown key (the keys its model takes there) or a mistyped tag."""
    if error["type"] == "extra_forbidden":
        return did_you_mean(error["loc"][-1], _known_keys(model, error["loc"][:-1]))
    if error["type"] == "union_tag_invalid":
        ctx = error.get("ctx") or {}
        return did_you_mean(ctx.get("tag"), [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")])
    return ""


def _known_keys(model: Any, loc: tuple) -> list[str]:
    """The keys the model takes where pydantic's `loc` points (its union tags included)."""
    node = model
    for part in loc:
        node = _inner(node, part)
        if node is None:
            return []
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [field.alias or name for name, field in node.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _inner(node: Any, part: str | int) -> Any:
    """The type one step into `node`: a model's field, a dict's value, a list's item, a union's member."""
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        fields = {field.alias or name: field for name, field in node.model_fields.items()}
        return fields[part].annotation if part in fields else None
    origin, args = get_origin(node), get_args(node)
    if origin is dict:
        return args[1]
    if origin is list:
        return args[0]
    if origin in (Union, types.UnionType):
        for member in map(_unwrap, args):
            if getattr(member, "__name__", None) == part or part in literal_words(
                    getattr(member, "model_fields", {}).get("type").annotation if "type" in getattr(member, "model_fields", {}) else None):
                return member
        models = [m for m in map(_unwrap, args) if isinstance(m, type) and issubclass(m, BaseModel)]
        return _inner(models[0], part) if len(models) == 1 else None
    return None


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
