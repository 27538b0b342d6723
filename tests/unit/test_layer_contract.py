"""The layer contract (pyproject.toml [tool.importlinter]) holds on this tree, and fails on a copy of it with
an upward import planted: at module level, and inside a function (a lazy import is an import too)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """lint-imports on the `sweeper` package under `tree`, with the contracts of `tree`'s pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "sweeper", tmp_path / "sweeper", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_real_tree_keeps_the_layers():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "layers KEPT" in result.stdout


def test_a_module_level_upward_import_breaks_the_contract(tree_copy: Path):
    expr = tree_copy / "sweeper" / "spec" / "expr.py"
    expr.write_text(expr.read_text() + "\nfrom sweeper.cli import common  # planted\n")
    result = lint_imports(tree_copy)
    assert result.returncode == 1
    assert "layers BROKEN" in result.stdout
    assert "sweeper.spec.expr -> sweeper.cli.common" in result.stdout


def test_a_function_level_upward_import_breaks_the_contract(tree_copy: Path):
    trials = tree_copy / "sweeper" / "study" / "trials.py"
    trials.write_text(trials.read_text() + "\n\ndef planted():\n    from sweeper.workflows import campaign_phases\n"
                      "    return campaign_phases\n")
    result = lint_imports(tree_copy)
    assert result.returncode == 1
    assert "sweeper.study.trials -> sweeper.workflows.campaign_phases" in result.stdout
