"""docs/architecture.md holds scripts/import_graph.py's table as it is today, and the graph has no cycle."""

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRAPH = runpy.run_path(str(ROOT / "scripts" / "import_graph.py"))


def test_the_doc_holds_the_generated_table():
    table = GRAPH["table"](GRAPH["edges"]())
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert table in doc, "docs/architecture.md is stale: paste `python scripts/import_graph.py`'s table"


def test_the_package_graph_has_no_cycle():
    assert GRAPH["cycles"](GRAPH["edges"]()) == []


def test_a_cycle_is_found(tmp_path):
    root = tmp_path / "sweeper"
    for package, imported in (("a", "b"), ("b", "a")):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(f"def f():\n    from sweeper.{imported} import x\n")
    found = GRAPH["edges"](root)
    assert found[("a", "b")]["function"] == 1
    assert GRAPH["cycles"](found) == [["a", "b"]]
