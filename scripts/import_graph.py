"""The package import graph of sweeper/, read from the source with `ast` (nothing is imported).

An edge A -> B counts the `sweeper.B` imports written in package A's modules: at module level ("top") and inside
a function or method ("function"). A package is the first name under sweeper/ (sweeper/errors.py is `errors`).
`python scripts/import_graph.py` prints the Markdown table that docs/architecture.md holds (a test compares them),
then the cycles (none); `--check` exits 1 on a cycle.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "sweeper"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _package(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if parts[0] == "sweeper" and len(parts) > 1 else None


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(target module, inside a function?) for every import in the module."""

    def walk(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, in_function
            elif isinstance(child, ast.ImportFrom):
                target = _absolute(child, module, is_package)
                for alias in child.names:
                    # `from sweeper import study` imports the package sweeper.study
                    yield (f"{target}.{alias.name}" if target == "sweeper" else target), in_function
            yield from walk(child, nested)

    yield from walk(tree, False)


def edges(root: Path = ROOT) -> dict[tuple[str, str], Counter]:
    """(from package, to package) -> Counter of "top" and "function" imports, self-edges left out."""
    found: dict[tuple[str, str], Counter] = {}
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        source = _package(module) or "sweeper"
        tree = ast.parse(path.read_text(), str(path))
        for target, in_function in _imports(tree, module, path.name == "__init__.py"):
            to = _package(target)
            if to is None or to == source or not (root / to).is_dir() and not (root / f"{to}.py").exists():
                continue
            found.setdefault((source, to), Counter())["function" if in_function else "top"] += 1
    return found


def cycles(found: dict[tuple[str, str], Counter]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in found:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def table(found: dict[tuple[str, str], Counter]) -> str:
    """The Markdown table: one row per edge, sorted by importing package then imported one."""
    rows = ["| package | imports | top-level | function-level |", "|---|---|---:|---:|"]
    for (a, b), count in sorted(found.items()):
        rows.append(f"| {a} | {b} | {count['top']} | {count['function']} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    found = edges()
    loops = cycles(found)
    if "--check" not in argv:
        sys.stdout.write(table(found))
        print(f"\ncycles: {len(loops)}")
    for loop in loops:
        print("cycle: " + " <-> ".join(loop))
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
