"""scripts/architecture_bar.py: the bar's figures, on a planted tree and on the real one."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "architecture_bar.py"


def run_bar(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=120)


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def clean_tree(root: Path) -> None:
    write(root, "sweeper/__init__.py", "")
    write(root, "sweeper/short.py", "def f():\n    return 1\n")
    # a 70-line table written as code: a data literal, not a long function
    rows = "".join(f"        'k{i}': {i},\n" for i in range(68))
    write(root, "sweeper/table.py", "def table():\n    return {\n" + rows + "    }\n")
    write(root, "tests/__init__.py", "")
    write(root, "tests/support/__init__.py", "")
    write(root, "tests/support/builders.py", "def build():\n    return 1\n")
    write(root, "tests/unit/test_a.py", "from tests.support.builders import build\n\n\ndef test_a():\n    assert build()\n")


def test_a_clean_tree_passes(tmp_path):
    clean_tree(tmp_path)
    result = run_bar(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "functions over 60 lines (outside data literals): 0" in result.stdout
    assert "modules over 500 lines: 0" in result.stdout
    assert "test modules importing test modules: 0" in result.stdout


def test_one_planted_offender_of_each_kind_is_named(tmp_path):
    clean_tree(tmp_path)
    body = "".join(f"    x{i} = {i}\n" for i in range(61))
    write(tmp_path, "sweeper/long.py", "def too_long():\n" + body + "    return x0\n")
    write(tmp_path, "sweeper/big.py", "".join(f"X{i} = {i}\n" for i in range(501)))
    write(tmp_path, "tests/unit/test_b.py", "from tests.unit.test_a import test_a\n")
    write(tmp_path, "tests/e2e/test_c.py", "from . import conftest\n")
    write(tmp_path, "tests/e2e/conftest.py", "")
    result = run_bar(tmp_path)
    assert result.returncode == 1
    out = result.stdout
    assert "functions over 60 lines (outside data literals): 1" in out and "sweeper/long.py:1 too_long (63 lines)" in out
    assert "modules over 500 lines: 1" in out and "sweeper/big.py (501 lines)" in out
    assert "test modules importing test modules: 2" in out
    assert "tests/unit/test_b.py:1 imports tests/unit/test_a.py" in out
    assert "tests/e2e/test_c.py:1 imports tests/e2e/conftest.py" in out


def test_the_real_tree_meets_the_bar():
    result = run_bar(ROOT)
    assert result.returncode == 0, result.stdout
