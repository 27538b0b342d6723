"""Reading a search-space file: YAML -> a validated, cross-checked Space (every problem at once,
each naming its line), its workload paths taken from the file's folder, its dataset checked readable."""

from __future__ import annotations

from pathlib import Path

from sweeper.errors import ConfigError, did_you_mean
from sweeper.spaces import packaged_spaces  # the names a SPACE argument may also be
from sweeper.spec.datasets import DatasetError, load_dataset
from sweeper.spec.engine_traits import request_api
from sweeper.spec.loading import validate_model
from sweeper.spec.space import Space
from sweeper.spec.space_checks import cross_check_space
from sweeper.spec.yamlfile import format_path, line_of, parse_yaml_with_lines


def load_space(path: Path) -> Space:
    if not path.is_file():
        names = sorted(packaged_spaces())
        raise ConfigError(str(path), "", f"file not found (or a packaged space: {', '.join(names)})"
                          + did_you_mean(str(path).removesuffix(".yaml"), names))
    text = path.read_text()
    return check_workload_files(resolve_workload_paths(parse_space(text, str(path)), path.parent), text, str(path))


def resolve_workload_paths(space: Space, base: Path) -> Space:
    """The workload's dataset and tokenizer paths taken from the space file's folder."""
    updates = {key: str((base / value).expanduser()) for key in ("dataset", "tokenizer")
               if (value := getattr(space.workload, key)) and not Path(value).expanduser().is_absolute()}
    return space.model_copy(update={"workload": space.workload.model_copy(update=updates)}) if updates else space


def check_workload_files(space: Space, text: str, source: str) -> Space:
    """A dataset that cannot be read is refused when the space loads (nothing is launched): one
    line naming the dataset file and its record."""
    workload = space.workload
    if workload.dataset is None:
        return space
    try:
        records = load_dataset(Path(workload.dataset), workload.dataset_format)
        api = request_api(space.engine)
        if api != "chat" and (chat := next((i for i, r in enumerate(records) if r.messages), None)) is not None:
            raise DatasetError(f"{workload.dataset}: record {chat + 1} has chat \"messages\", but {space.engine} "
                               f"is sent {api} requests (write \"prompt\" records)")
    except DatasetError as exc:
        _, lines = parse_yaml_with_lines(text, source)
        raise ConfigError(source, "workload.dataset", str(exc), line_of(lines, ("workload", "dataset"))) from None
    return space


def parse_space(text: str, source: str) -> Space:
    duplicates: list[ConfigError] = []
    data, lines = parse_yaml_with_lines(text, source, duplicates)
    if not isinstance(data, dict):
        raise ConfigError(source, "", "expected a mapping at the top level")
    space = validate_model(source, data, lines, Space, duplicates)
    problems = duplicates + [ConfigError(source, format_path(path), message, line_of(lines, path))
                             for path, message in cross_check_space(space)]
    if problems:
        raise ConfigError.all_of(sorted(problems, key=lambda e: e.line or 0))
    return space
