"""Where the checkout and its shipped files are."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO_SPACE = ROOT / "search_spaces" / "demo-sim.yaml"
FIXTURE_DIR = ROOT / "tests" / "fixtures"  # recorded answers of real engines, GPUs and tools
