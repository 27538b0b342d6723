"""Templates shipped inside the package, so that a pip install needs no checkout: the demo space
(`sweeper demo`), the case-study spaces, and a hosts file (`sweeper init` copies them). A command
that takes a SPACE file also takes a packaged space's name (`sweeper doctor demo`)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

ALIASES = {"demo": "demo-sim"}  # the name `sweeper demo` and the README use
HOSTS_TEMPLATE = "hosts.yaml"


def packaged_file(name: str) -> Path:
    return Path(str(files(__name__).joinpath(name)))


def packaged_spaces() -> dict[str, Path]:
    """Each packaged space by its name (the file's stem), and the aliases."""
    found = {path.stem: path for path in map(Path, map(str, files(__name__).iterdir()))
             if path.suffix == ".yaml" and path.name != HOSTS_TEMPLATE}
    return {**found, **{alias: found[target] for alias, target in ALIASES.items() if target in found}}


def find_space_file(path: Path) -> Path:
    """`path` when it exists (or names no packaged space); else the packaged space it names."""
    if path.exists():
        return path
    return packaged_spaces().get(str(path).removesuffix(".yaml"), path)
