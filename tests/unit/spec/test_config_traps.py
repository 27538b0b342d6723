"""Config traps that used to pass silently or fail mid-sweep: each is refused (or read as meant)
when the file is loaded, with every problem of the file on its own line."""


import pytest

from sweeper.errors import ConfigError
from sweeper.spec.expr import ExprError, parse_expr
from sweeper.spec.hosts import load_host, load_hosts
from sweeper.spec.space_file import parse_space

SPACE = """\
name: t
engine: sim
model: m
parameters:
  backend: {type: categorical, choices: [auto, 1, 2], flag: --backend}
  tp_size: {type: categorical, choices: [2, 4, 8], flag: --tp-size}
  mem: {type: float, low: 0.5, high: 0.9, flag: --mem}
"""


def space_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_space(text, "space.yaml")
    return info.value


def test_a_duplicated_key_is_refused_with_both_lines():
    text = SPACE + "  tp_size: {type: categorical, choices: [8], flag: --tp-size}\n"
    error = space_error(text)
    assert error.path == "parameters.tp_size" and error.line == 8
    assert "duplicate key (first at line 6)" in str(error)


def test_a_duplicated_host_key_is_refused_too(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  box:\n    transport: local\n    gpus: 8\n    gpus: 4\n")
    with pytest.raises(ConfigError) as info:
        load_hosts(path)
    assert str(info.value) == (f"{path}:5: hosts.box.gpus: duplicate key (first at line 4): "
                               "YAML would keep only the last value")


@pytest.mark.parametrize("word, meant", [("on", "on"), ("off", "off"), ("yes", "on"), ("'on'", "on"), ("auto", "auto")])
def test_an_unquoted_switch_word_means_what_it_says(tmp_path, word, meant):
    path = tmp_path / "hosts.yaml"
    path.write_text(f"hosts:\n  box:\n    transport: local\n    gpu_gate: {word}\n")
    assert load_host(path, "box").gpu_gate == meant


@pytest.mark.parametrize("key, text, got", [
    ("check.mode", "check: {mode: off}\n", "'auto', 'reference-only' or 'none' (got False)"),
    ("search.sampler", "search: {sampler: yes}\n", "(got True)"),
    ("workload.arrival", "workload: {arrival: no}\n", "'poisson' or 'fixed' (got False)"),
])
def test_an_unquoted_yaml_boolean_for_any_other_enum_key_is_refused_with_a_hint_to_quote(key, text, got):
    lines = str(space_error(SPACE + text)).splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"space.yaml:8: {key}: expected one of "), lines
    assert lines[0].endswith(f"{got}: YAML reads an unquoted on/off/yes/no/true/false as a boolean; quote the word")


def test_an_unquoted_yaml_boolean_for_a_host_enum_key_is_refused_too(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  box:\n    transport: local\n    load_from: on\n")
    with pytest.raises(ConfigError, match=r"hosts.yaml:4: hosts.box.load_from: expected one of 'auto', 'controller' "
                                          r"or 'host' \(got True\): YAML reads an unquoted"):
        load_hosts(path)


def test_ordering_a_categorical_that_mixes_words_and_numbers_is_refused_at_load():
    error = space_error(SPACE + "constraints:\n  - backend < 3\n")
    assert error.path == "constraints[0]" and error.line == 9
    assert "cannot compare 'auto' with 3" in error.detail and "backend='auto'" in error.detail


def test_a_guarded_comparison_passes():
    space = parse_space(SPACE + "constraints:\n  - backend == 'auto' or backend < 3\n", "space.yaml")
    assert space.constraints == ["backend == 'auto' or backend < 3"]


def test_a_derived_value_is_probed_through_its_parameters():
    text = SPACE + "derived:\n  half: {expr: 'tp_size / 2', flag: --half}\nrules:\n  - {forbid: half < 'x', reason: r}\n"
    error = space_error(text)
    assert error.path == "rules[0].forbid" and "cannot compare" in error.detail


def test_arithmetic_is_bounded():
    with pytest.raises(ExprError, match="exponents up to 64"):
        parse_expr("10 ** 10 ** 10").evaluate({})
    with pytest.raises(ExprError, match="repetition"):
        parse_expr("'a' * 100000").evaluate({})
    error = space_error(SPACE + "constraints:\n  - tp_size ** 1000 > 1\n")  # found at load, not mid-sweep
    assert "exponents up to 64" in error.detail


def test_every_problem_of_a_file_is_reported_at_once():
    text = SPACE.replace("model: m\n", "model: m\nbudgett: {trials: 3}\n") + "workload: {concurrency: [1, x]}\nseedz: []\n"
    error = space_error(text)
    lines = str(error).splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith("space.yaml:") for line in lines)
    assert [line.split(": ")[1] for line in lines] == ["budgett", "workload.concurrency[1]", "seedz"]


def test_every_cross_check_problem_is_reported_at_once():
    text = SPACE + "constraints:\n  - nope > 1\n  - backend < 3\nreference: missing\n"
    lines = str(space_error(text)).splitlines()
    assert [line.split(": ")[1] for line in lines] == ["constraints[0]", "constraints[1]", "reference"]


def test_a_missing_optional_package_names_the_extra_that_brings_it():
    from sweeper.errors import UserError, import_optional

    with pytest.raises(UserError, match=r"a Parquet export needs the 'no_such_pkg' package: pip install 'sweeper\[parquet\]'"):
        import_optional("no_such_pkg", "parquet", "a Parquet export")


def test_a_postgres_storage_without_psycopg_names_the_extra(monkeypatch):
    import sys

    from sweeper.errors import UserError
    from sweeper.study.storage import open_storage

    monkeypatch.setitem(sys.modules, "psycopg", None)  # the import fails as when it is not installed
    with pytest.raises(UserError) as info:
        open_storage("postgresql+psycopg://sweeper:hunter2@127.0.0.1:1/sweeper")
    assert str(info.value) == ("the storage postgresql+psycopg://sweeper:***@127.0.0.1:1/sweeper needs the "
                               "'psycopg' package: pip install 'sweeper[postgres]'")
