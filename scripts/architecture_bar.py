#!/usr/bin/env python3
"""The architecture bar (issue 31): its figures for a source tree, each with its offenders named.

- functions over 60 lines, outside data literals: a function's lines run from its `def` to its
  last line (a nested function counts in its parent too). A function is a data literal when one
  literal (a dict, list, tuple or set display, or a string) spans at least three quarters of its
  body: a table written as code, whose length is its data's.
- modules over 500 lines;
- test modules importing test modules: a module under tests/ importing another module under
  tests/ that is not in tests/support/ (the shared helpers; tests/__init__.py is no test module).

Prints one line per figure, then its offenders; exits 1 when any figure is non-zero.
Usage: scripts/architecture_bar.py [ROOT] (the repository root, by default this script's parent's).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
DATA_LITERAL_SHARE = 0.75
SOURCE_DIRS = ("sweeper", "tests", "bench", "scripts")  # the tree's Python, build outputs left out
SKIPPED_PARTS = frozenset({".venv", "__pycache__", "build", "dist", ".git"})
LITERALS = (ast.Dict, ast.List, ast.Tuple, ast.Set)


@dataclass(frozen=True)
class Offender:
    where: str  # path[:line] name
    size: int  # lines (0 for an import)

    def __str__(self) -> str:
        return f"  {self.where}" + (f" ({self.size} lines)" if self.size else "")


def python_files(root: Path) -> list[Path]:
    """Every .py file under the tree's source folders, sorted."""
    found = []
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            if not SKIPPED_PARTS.intersection(path.relative_to(root).parts):
                found.append(path)
    return found


def _literal_span(node: ast.AST) -> int:
    """Lines of the largest literal inside `node` (0 when it holds none)."""
    spans = [n.end_lineno - n.lineno + 1 for n in ast.walk(node)
             if isinstance(n, LITERALS) or (isinstance(n, ast.Constant) and isinstance(n.value, str))]
    return max(spans, default=0)


def is_data_literal(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """True when one literal spans at least DATA_LITERAL_SHARE of the function's body."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # its docstring is no data
    if not body:
        return False
    body_lines = body[-1].end_lineno - body[0].lineno + 1
    return max(_literal_span(stmt) for stmt in body) >= DATA_LITERAL_SHARE * body_lines


def long_functions(root: Path, files: list[Path]) -> list[Offender]:
    """Functions over MAX_FUNCTION_LINES lines that are no data literal, longest first."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and not is_data_literal(node):
                    found.append(Offender(f"{path.relative_to(root)}:{node.lineno} {node.name}", lines))
    return sorted(found, key=lambda o: -o.size)


def long_modules(root: Path, files: list[Path]) -> list[Offender]:
    """Modules over MAX_MODULE_LINES lines, longest first."""
    sizes = [(path, len(path.read_text().splitlines())) for path in files]
    return sorted((Offender(str(path.relative_to(root)), n) for path, n in sizes if n > MAX_MODULE_LINES),
                  key=lambda o: -o.size)


def _is_test_module(root: Path, path: Path) -> bool:
    parts = path.relative_to(root).parts
    return parts[0] == "tests" and "support" not in parts[1:2] and path.name != "__init__.py"


def _imported_modules(tree: ast.Module, path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of each module the file imports, relative imports resolved, with each
    `from X import Y` also as X.Y (Y may be a module)."""
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.append((node.lineno, module))
            names += [(node.lineno, f"{module}.{alias.name}" if module else alias.name) for alias in node.names]
    return names


def _module_file(root: Path, dotted: str) -> Path | None:
    """The file under root that a dotted name is, if any (a package's __init__.py)."""
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_imports_of_tests(root: Path, files: list[Path]) -> list[Offender]:
    """Each import, by a test module, of another test module (tests.support excluded)."""
    found = []
    for path in files:
        if not _is_test_module(root, path):
            continue
        seen = set()
        for line, dotted in _imported_modules(ast.parse(path.read_text(), str(path)), path, root):
            target = _module_file(root, dotted)
            if target is None or target == path or not _is_test_module(root, target) or target in seen:
                continue
            seen.add(target)
            found.append(Offender(f"{path.relative_to(root)}:{line} imports {target.relative_to(root)}", 0))
    return found


def bar_figures(root: Path) -> dict[str, list[Offender]]:
    """Each figure's name -> its offenders."""
    files = python_files(root)
    return {f"functions over {MAX_FUNCTION_LINES} lines (outside data literals)": long_functions(root, files),
            f"modules over {MAX_MODULE_LINES} lines": long_modules(root, files),
            "test modules importing test modules": test_imports_of_tests(root, files)}


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    figures = bar_figures(root)
    for name, offenders in figures.items():
        print(f"{name}: {len(offenders)}")
        for offender in offenders:
            print(offender)
    return 1 if any(figures.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
