"""A newcomer's first hour (issue 30): each failure they hit, as they hit it, in-process through
typer's CliRunner where no subprocess is what is tested."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from tests.support.paths import DEMO_SPACE


def invoke(workdir: Path, *args: str, monkeypatch=None):
    """The app in `workdir`, as `sweeper ARGS` there (stdout and stderr apart)."""
    import os

    old = Path.cwd()
    os.chdir(workdir)
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        os.chdir(old)


def demo_space(tmp_path: Path, name: str = "space.yaml", **replace: str) -> Path:
    text = DEMO_SPACE.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- 1. a seed value outside its choices

@pytest.mark.parametrize("command", ["doctor", "sweep"])
def test_a_seed_value_outside_its_choices_is_refused_at_load(tmp_path, command):
    demo_space(tmp_path, **{"moe_runner_backend: marlin, moe_a2a_backend: none":
                            "moe_runner_backend: marlinn, moe_a2a_backend: none"})
    result = invoke(tmp_path, command, "space.yaml")
    assert result.exit_code == 2, result.output
    assert ("space.yaml:35: seeds[0].params.moe_runner_backend: 'marlinn' is not one of the choices"
            in result.output and "did you mean 'marlin'?" in result.output), result.output
    assert "Traceback" not in result.output and not (tmp_path / "results").exists()
