"""The README and docs/*.md against the code, so they cannot drift apart:

- every `sweeper ...` command line it shows (in a code block, or inline in backticks) names a real
  command of the Typer app (its click command, typer.main.get_command) and only options that
  command (or the global options before it) has;
- every ```yaml block is either a hosts file (a top-level `hosts:`), validated as hosts.yaml is, or
  a search space or a fragment of one (every top-level key a key of a space), validated as the
  smallest space (one parameter, every other key at its default) with the fragment's keys put in.
  A block that is neither fails: the rule has no third kind;
- every key in the first column of the "Search space" and "Workload keys" tables (docs/
  configuration.md) is a key of a space (its first part) and of `workload`;
- the README stays a first hour's read (at most 300 lines) and links every docs/ file.
"""

from __future__ import annotations

import re

import pytest
import typer.main
import yaml

from sweeper.cli import app
from sweeper.errors import ConfigError
from sweeper.spec.hosts import HostsFile
from sweeper.spec.loading import validate_model
from sweeper.spec.space import Space, Workload
from sweeper.spec.space_file import parse_space
from sweeper.spec.yamlfile import parse_yaml_with_lines
from tests.support.readme import block_commands, code_blocks, docs, inline_commands, readme

README = readme()
DOCS = docs()
ALL_DOCS = "\n".join(DOCS.values())
ROOT_COMMAND = typer.main.get_command(app)
PLACEHOLDER_COMMAND = "COMMAND"  # `sweeper COMMAND --help`


# ---------------------------------------------------------------- command lines

def command_lines(markdown: str) -> list[str]:
    """Every `sweeper ...` command the text shows: in its code blocks (all but YAML), then inline."""
    return block_commands(markdown, languages=("bash", "")) + inline_commands(markdown)


def option_names(command) -> set[str]:
    return {name for param in command.params for name in (*param.opts, *param.secondary_opts)
            if name.startswith("-")} | {"--help"}


def takes_value(command, option: str) -> bool:
    return any(option in param.opts and param.param_type_name == "option" and not param.is_flag
               for param in command.params)


def is_group(command) -> bool:
    """Typer vendors its own click (typer._click), so a group is known by its subcommands."""
    return hasattr(command, "commands")


def command_problems(line: str) -> list[str]:
    """What in one `sweeper ...` line the app does not have (an empty list when it all exists)."""
    tokens = [t for t in re.sub(r"[\[\]]", " ", line).split() if t not in ("|", "...")]
    assert tokens[0] == "sweeper", line
    rest = tokens[1:]
    while rest and rest[0].startswith("-"):  # global options go before the command
        option = rest.pop(0).split("=")[0]
        if option not in option_names(ROOT_COMMAND):
            return [f"{line!r}: {option} is not a global option"]
        if takes_value(ROOT_COMMAND, option) and rest:
            rest.pop(0)
    if not rest:
        return []  # `sweeper --version`
    command, path = ROOT_COMMAND, ["sweeper"]
    while is_group(command):
        if not rest:
            return [f"{line!r}: {' '.join(path)} needs a command"]
        name = rest.pop(0)
        if name == PLACEHOLDER_COMMAND and command is ROOT_COMMAND:
            return []
        if name not in command.commands:
            return [f"{line!r}: {' '.join(path)} has no command {name!r}"]
        command, path = command.commands[name], [*path, name]
    known = option_names(command)
    return [f"{line!r}: {' '.join(path)} has no option {option}"
            for option in (t.split("=")[0] for t in rest if re.match(r"--?[A-Za-z]", t))
            if option not in known]


def test_the_readme_is_a_first_hours_read_and_links_every_doc():
    assert len(README.splitlines()) <= 300
    assert [path for path in DOCS if path.startswith("docs/") and f"({path})" not in README] == []


def test_the_docs_show_many_commands():
    lines = command_lines(ALL_DOCS)
    verbs = {line.split()[1] for line in lines}
    assert len(lines) > 60 and {"sweep", "doctor", "campaign", "load", "profile", "best"} <= verbs, verbs


@pytest.mark.parametrize("path", list(DOCS))
def test_every_command_line_of_the_docs_names_a_real_command_and_its_options(path):
    problems = [problem for line in command_lines(DOCS[path]) for problem in command_problems(line)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("line, problem", [
    ("sweeper sweep SPACE --host local --no-such-option 3", "sweeper sweep has no option --no-such-option"),
    ("sweeper best STUDY --scrpit", "sweeper best has no option --scrpit"),
    ("sweeper validate STUDY [--top 3] [--repeat 3]", "sweeper validate has no option --repeat"),
    ("sweeper summon STUDY", "sweeper has no command 'summon'"),
    ("sweeper sim optimum SPACE", "sweeper sim has no command 'optimum'"),
    ("sweeper --loud sweep SPACE", "--loud is not a global option"),
])
def test_a_made_up_command_or_option_is_caught(line, problem):
    problems = command_problems(line)
    assert len(problems) == 1 and problem in problems[0], problems


def test_real_lines_of_every_shape_pass():
    for line in ("sweeper --quiet sweep SPACE --host local", "sweeper --log-file p.log sweep SPACE",
                 "sweeper sim best SPACE", "sweeper models make-gguf --layers 4 --width 256 --out m.gguf",
                 "sweeper leaderboard STUDY [--feasible-only] [--csv out.csv]", "sweeper COMMAND --help",
                 "sweeper --version"):
        assert command_problems(line) == [], line


def test_inline_and_block_commands_are_both_found():
    text = "Run `sweeper show STUDY\n--watch` or:\n\n```bash\nsweeper sweep S \\\n  --trials 3   # a comment\n```\n"
    assert command_lines(text) == ["sweeper sweep S --trials 3", "sweeper show STUDY --watch"]


# ---------------------------------------------------------------- YAML blocks

SPACE_KEYS = set(Space.model_fields) | {field.alias for field in Space.model_fields.values() if field.alias}
# The smallest space: a fragment's keys are put into it (the keys it sets replace these)
BASE_SPACE = {"name": "readme", "engine": "sim", "model": "demo",
              "parameters": {"tp_size": {"type": "categorical", "choices": [8], "flag": "--tp-size"}}}


def yaml_problem(block: str) -> str | None:
    """Why a README YAML block would not load (None when it loads), by the rule above."""
    try:
        data, lines = parse_yaml_with_lines(block, "README.md")
        if not isinstance(data, dict):
            return "not a mapping"
        if "hosts" in data:
            validate_model("README.md", data, lines, HostsFile)
            return None
        if unknown := set(data) - SPACE_KEYS:
            return f"neither a hosts file nor a space: {sorted(unknown)} are not keys of a space"
        space = data if "parameters" in data else {**BASE_SPACE, **data}
        parse_space(yaml.safe_dump(space, sort_keys=False), "README.md")
    except ConfigError as exc:
        return str(exc)
    return None


def readme_yaml_blocks() -> list[str]:
    return [body for text in DOCS.values() for language, body in code_blocks(text) if language == "yaml"]


def test_the_readme_has_hosts_and_space_blocks():
    blocks = readme_yaml_blocks()
    assert sum("hosts:" in block.split("\n", 1)[0] for block in blocks) >= 3 and len(blocks) >= 6


@pytest.mark.parametrize("block", readme_yaml_blocks(), ids=lambda block: block.split("\n", 1)[0][:40])
def test_every_readme_yaml_block_loads(block):
    assert yaml_problem(block) is None, (yaml_problem(block), block)


@pytest.mark.parametrize("block, problem", [
    ("hosts:\n  box: {transport: ssh, address: box, gpus: 8, gpu_gaet: on}\n", "gpu_gaet"),
    ("workload:\n  input_len: 512\n  concurency: [1, 4]\n", "concurency"),
    ("objective: {metric: output_throughput}\nobjective: {metric: p99_ttft_ms}\n", "duplicate key"),
    ("launcher: {ready_timeout_s: 60}\n", "neither a hosts file nor a space"),
])
def test_a_wrong_yaml_block_is_caught(block, problem):
    assert problem in (yaml_problem(block) or ""), yaml_problem(block)


# ---------------------------------------------------------------- key tables

def table_keys(heading: str) -> list[str]:
    """The backticked names in the first column of the table under `heading` (up to the next heading)."""
    configuration = DOCS["docs/configuration.md"]
    start = configuration.index(f"\n{heading}\n")
    end = configuration.find("\n#", start + 1)
    rows = [line for line in configuration[start:end if end >= 0 else None].splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_every_key_of_the_search_space_table_is_a_key_of_a_space():
    keys = table_keys("### Search space (`search_spaces/*.yaml`)")
    assert len(keys) > 15 and {key.split(".")[0] for key in keys} <= SPACE_KEYS, set(keys)


def test_every_key_of_the_workload_table_is_a_workload_key():
    keys = table_keys("### Workload keys")
    assert len(keys) > 20 and set(keys) <= set(Workload.model_fields), set(keys) - set(Workload.model_fields)
