"""Every package's docstring lists its modules, one `- name.py  what it holds` line each, exactly those on disk;
an __init__ that re-exports its modules' names has a curated __all__: those names and what it defines itself."""

import ast
import importlib
import re
from pathlib import Path

import pytest

SWEEPER = Path(__file__).resolve().parents[2] / "sweeper"
PACKAGES = sorted(p.parent for p in SWEEPER.rglob("__init__.py") if "__pycache__" not in p.parts)


def dotted(package: Path) -> str:
    return ".".join(package.relative_to(SWEEPER.parent).parts)


def listed_modules(package: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return re.findall(r"^- (\w+\.py)\b", doc, re.MULTILINE)


def modules_on_disk(package: Path) -> list[str]:
    return sorted(p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))


@pytest.mark.parametrize("package", PACKAGES, ids=dotted)
def test_the_docstring_lists_each_module_once(package):
    listed = listed_modules(package)
    assert sorted(listed) == modules_on_disk(package), f"{dotted(package)}'s catalogue has drifted"
    assert len(listed) == len(set(listed))


def reexports(package: Path) -> tuple[set[str], set[str], list[str] | None]:
    """(names imported from the package's own modules, public names defined in the __init__, its __all__)."""
    tree = ast.parse((package / "__init__.py").read_text())
    own, defined, declared = set(), set(), None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(dotted(package) + "."):
            own |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    declared = ast.literal_eval(node.value)
                elif isinstance(target, ast.Name) and not target.id.startswith("_"):
                    defined.add(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not node.target.id.startswith("_"):
            defined.add(node.target.id)
    return own, defined, declared


@pytest.mark.parametrize("package", PACKAGES, ids=dotted)
def test_a_reexporting_init_has_a_curated_all(package):
    own, defined, declared = reexports(package)
    if not own:
        return
    assert declared is not None, f"{dotted(package)} re-exports {sorted(own)} without __all__"
    assert sorted(declared) == sorted(own | defined)
    module = importlib.import_module(dotted(package))
    for name in declared:
        assert hasattr(module, name), f"{dotted(package)}.__all__ names {name}, which is not there"
