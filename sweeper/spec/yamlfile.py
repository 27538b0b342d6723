"""YAML reading that remembers where each key sits, so errors can name the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sweeper.errors import ConfigError

KeyPath = tuple[str | int, ...]


def load_yaml_with_lines(path: Path, duplicates: list[ConfigError] | None = None) -> tuple[Any, dict[KeyPath, int]]:
    """Parse a YAML file; return the data and a map from key path to 1-based line."""
    if not path.is_file():
        raise ConfigError(str(path), "", "file not found")
    return parse_yaml_with_lines(path.read_text(), str(path), duplicates)


def parse_yaml_with_lines(text: str, source: str,
                          duplicates: list[ConfigError] | None = None) -> tuple[Any, dict[KeyPath, int]]:
    """The data and its lines. A duplicate key is an error: raised at once, or, given a
    `duplicates` list, put there, so that the caller reports it with the file's other problems."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise ConfigError(source, "", f"not valid YAML: {getattr(exc, 'problem', exc)}", line) from None
    lines: dict[KeyPath, int] = {}
    found: list[ConfigError] = []
    if node is not None:
        _collect_lines(node, (), lines, lambda path, first, again: found.append(ConfigError(
            source, format_path(path), f"duplicate key (first at line {first}): YAML would keep only the "
                                       f"last value", again)))
    if found and duplicates is None:
        raise ConfigError.all_of(found)
    if duplicates is not None:
        duplicates.extend(found)
    return data, lines


def _collect_lines(node: yaml.Node, prefix: KeyPath, out: dict[KeyPath, int], on_duplicate) -> None:
    out.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            path = prefix + (key,)
            if key in seen:
                on_duplicate(path, out[path], key_node.start_mark.line + 1)
                continue
            seen.add(key)
            out[path] = key_node.start_mark.line + 1
            _collect_lines(value_node, path, out, on_duplicate)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = prefix + (index,)
            out[path] = item.start_mark.line + 1
            _collect_lines(item, path, out, on_duplicate)


def line_of(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """The line of the deepest existing prefix of `path`."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
