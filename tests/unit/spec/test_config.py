"""Bad input gives one line naming the file, the line and the key path."""

from pathlib import Path

import pytest

from sweeper.spec.hosts import load_host
from sweeper.spec.space import space_fingerprint
from sweeper.spec.space_file import load_space
from sweeper.errors import ConfigError
from tests.support.paths import DEMO_SPACE, ROOT

MINIMAL = """\
name: t
engine: sim
model: m
parameters:
  tp_size: {type: categorical, choices: [2, 4, 8], flag: --tp-size}
  ep_size: {type: int, low: 1, high: 8, flag: --ep-size}
"""


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_space(path)
    return info.value


def test_shipped_spaces_and_hosts_load():
    space = load_space(DEMO_SPACE)
    assert space.engine == "sim" and space.objective_level == 16
    assert load_host(ROOT / "hosts.yaml", "local").transport == "local"


def test_unknown_key_names_file_line_and_path(tmp_path):
    path = write(tmp_path, MINIMAL.replace("flag: --tp-size}", "flag: --tp-size, colour: red}"))
    error = error_of(path)
    assert (error.path, error.line) == ("parameters.tp_size.colour", 5)
    assert str(error) == f"{path}:5: parameters.tp_size.colour: unknown key"


def test_unknown_top_level_key(tmp_path):
    error = error_of(write(tmp_path, MINIMAL + "budgett: {trials: 3}\n"))
    assert error.path == "budgett" and error.line == 7


def test_wrong_type(tmp_path):
    error = error_of(write(tmp_path, MINIMAL.replace("high: 8", "high: eight")))
    assert error.path == "parameters.ep_size.high" and error.line == 6
    assert "expected an integer" in error.detail and "'eight'" in error.detail


def test_bad_range(tmp_path):
    error = error_of(write(tmp_path, MINIMAL.replace("low: 1, high: 8", "low: 9, high: 8")))
    assert error.path == "parameters.ep_size" and "below high" in error.detail


def test_unparsable_constraint(tmp_path):
    error = error_of(write(tmp_path, MINIMAL + "constraints:\n  - ep_size <= tp_size\n  - 'tp_size * <= 8'\n"))
    assert error.path == "constraints[1]" and error.line == 9 and "cannot parse" in error.detail


@pytest.mark.parametrize("expr, reason", [
    ("__import__('os').system('true')", "not allowed"),
    ("tp_size.real > 1", "not allowed"),
    ("pp_size <= 2", "unknown parameter pp_size"),
])
def test_constraints_are_not_evaluated_as_python(tmp_path, expr, reason):
    error = error_of(write(tmp_path, MINIMAL + f'constraints:\n  - "{expr}"\n'))
    assert reason in error.detail


def test_flag_or_env_exactly_one(tmp_path):
    error = error_of(write(tmp_path, MINIMAL.replace("flag: --ep-size", "flag: --ep-size, env: EP")))
    assert error.path == "parameters.ep_size" and "exactly one" in error.detail


def test_condition_must_name_an_earlier_parameter(tmp_path):
    text = MINIMAL.replace("flag: --tp-size}", "flag: --tp-size, when: {ep_size: 2}}")
    error = error_of(write(tmp_path, text))
    assert error.path == "parameters.tp_size.when.ep_size"


def test_seed_names_unknown_parameter(tmp_path):
    error = error_of(write(tmp_path, MINIMAL + "seeds:\n  - name: a\n    params: {pp: 1}\n"))
    assert error.path == "seeds[0].params.pp"


def test_missing_space_file(tmp_path):
    error = error_of(tmp_path / "nope.yaml")
    assert "file not found" in str(error) and "nope.yaml" in str(error)


def test_invalid_yaml(tmp_path):
    error = error_of(write(tmp_path, "name: [unclosed\n"))
    assert "not valid YAML" in error.detail and error.line is not None


def test_unknown_host_lists_known_ones(tmp_path):
    path = write(tmp_path, "hosts:\n  local: {transport: local}\n", "hosts.yaml")
    with pytest.raises(ConfigError) as info:
        load_host(path, "gpu-box")
    assert str(info.value) == f"{path}: hosts.gpu-box: no such host (known: local)"


def test_ssh_host_needs_address(tmp_path):
    path = write(tmp_path, "hosts:\n  box:\n    transport: ssh\n", "hosts.yaml")
    with pytest.raises(ConfigError) as info:
        load_host(path, "box")
    assert info.value.path == "hosts.box" and info.value.line == 2
    assert info.value.detail == "an ssh host needs 'address'"


def test_fingerprint_ignores_formatting(tmp_path):
    a = load_space(write(tmp_path, MINIMAL, "a.yaml"))
    b = load_space(write(tmp_path, "# comment\n" + MINIMAL.replace("[2, 4, 8]", "[2,4,8]"), "b.yaml"))
    c = load_space(write(tmp_path, MINIMAL.replace("[2, 4, 8]", "[2, 8]"), "c.yaml"))
    assert space_fingerprint(a) == space_fingerprint(b) != space_fingerprint(c)


def test_rule_and_derived_errors_name_their_keys(tmp_path):
    error = error_of(write(tmp_path, MINIMAL + "rules:\n  - {forbid: 'tp_size >', reason: x}\n"))
    assert error.path == "rules[0].forbid" and "cannot parse" in error.detail
    error = error_of(write(tmp_path, MINIMAL + "derived:\n  dp: {expr: 'pp * 2', flag: --dp}\n"))
    assert error.path == "derived.dp.expr" and "unknown parameter pp" in error.detail
    error = error_of(write(tmp_path, MINIMAL + "rules:\n  - {forbid: 'tp_size > 4'}\n"))
    assert error.path == "rules[0].reason"
