"""Results people read, end to end: a real sweep of the demo space on the simulator, then the
exports, the HTML report in a real headless Chromium, the gap to target against the simulator's
performance model, and the study in a real optuna-dashboard server."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

import sweeper
from sweeper.spec.space_file import load_space
from sweeper.results.figures import FIG_PIXELS
from sweeper.results.gap import build_study_gap
from sweeper.results.ranking import best_ranked_trial
from sweeper.sim.best import sim_config_of
from sweeper.sim.perf import step_time_ms
from tests.support.cli import Cli
from tests.support.paths import DEMO_SPACE, ROOT
from tests.support.ports import free_port, worker_port

# one worker runs this module: its module fixture is built once (xdist --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report_cli")]

CHROMIUM = "/usr/bin/chromium"
STUDY = "demo"
FIGURES = 7  # throughput, latency, pareto, serving trade-off, importance, failures, timeline


def demo_space_text() -> str:
    """The demo space with two simulator-only knobs changed so that the measured step resolves the
    model's: at 0.02 a 700 ms step is 14 ms of wall time and timer jitter of ~1-2 ms splits the
    inter-token gaps into modes several % apart (median ITL +3-5% off the model at C=16); at 0.05
    with the per-launch noise off it is within ~1%. Levers, target and failure modes are unchanged."""
    text = DEMO_SPACE.read_text()
    assert "  --time-scale: 0.02" in text and "\nfixed_env:" in text
    return (text.replace("  --time-scale: 0.02", "  --time-scale: 0.05")
            .replace("\nfixed_env:", "\n  --noise: 0\nfixed_env:"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Cli:
    """One real sweep of the demo space (its seeds and a few sampled configs), shared by the tests."""
    workdir = tmp_path_factory.mktemp("report")
    hosts = (ROOT / "hosts.yaml").read_text()
    assert "base_port: 31000" in hosts
    # This worker's own ports, away from other tests' servers (those of the e2e conftest start at 31000)
    (workdir / "hosts.yaml").write_text(hosts.replace("base_port: 31000", f"base_port: {worker_port(38000)}"))
    (workdir / "demo-sim.yaml").write_text(demo_space_text())
    cli = Cli(workdir)
    result = cli.run("sweep", "demo-sim.yaml", "--study", STUDY, "--trials", "4", timeout=280)
    assert result.returncode == 0, result.stderr
    assert best_ranked_trial(cli.study(STUDY)) is not None, f"no feasible trial in the sweep:\n{result.stdout[-4000:]}"
    return cli


def embedded_pngs(html: str) -> list[np.ndarray]:
    return [matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")
            for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def chromium(*args: str, workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={workdir / 'chromium-profile'}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120, cwd=workdir)


def test_report_opens_in_headless_chromium_with_its_plots(demo):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium not installed (make test-deps installs it)")
    result = demo.run("report", STUDY, "--out", "rep")
    assert result.returncode == 0, result.stderr
    html_path = demo.workdir / "rep" / "report.html"
    html = html_path.read_text()
    # self-contained: no file or network reference other than embedded data
    assert not re.search(r'(src|href)="(?!data:|#)', html)
    images = embedded_pngs(html)
    assert len(images) == FIGURES
    for image in images:
        assert image.shape[:2] == (FIG_PIXELS[1], FIG_PIXELS[0])
        assert image[..., :3].std() > 0.02 and len(np.unique(image[..., :3].reshape(-1, 3), axis=0)) > 50
    markdown = (demo.workdir / "rep" / "report.md").read_text()
    links = re.findall(r"\]\((figures/[a-z]+\.png)\)", markdown)
    assert len(links) == FIGURES and all((demo.workdir / "rep" / link).is_file() for link in links)

    shot = demo.workdir / "shot.png"
    run = chromium(f"--screenshot={shot}", "--window-size=1400,4000", html_path.as_uri(), workdir=demo.workdir)
    assert run.returncode == 0, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
              or "Failed to load" in line or "ERR_" in line]
    assert errors == []
    screenshot = matplotlib.image.imread(shot)
    assert screenshot.shape[:2] == (4000, 1400)
    pixels = (screenshot[..., :3] * 255).round().astype(int).reshape(-1, 3)
    assert pixels.std() > 5  # not a blank page
    # matplotlib's first line colour (C0, #1f77b4) appears only inside the plots: they were drawn
    c0 = np.abs(pixels - np.array([31, 119, 180])).max(axis=1) <= 12
    assert c0.sum() > 500
    dom = chromium("--dump-dom", html_path.as_uri(), workdir=demo.workdir)
    assert dom.returncode == 0 and dom.stdout.count('class="plot"') == FIGURES
    for section in ("Gap to target", "Pareto front", "Parameter importance", "Failures by stage and kind",
                    "Timeline of the sweep", "Provenance"):
        assert section in dom.stdout


def test_gap_to_target_agrees_with_the_simulator_model(demo):
    study = demo.study(STUDY)
    space = load_space(demo.workdir / "demo-sim.yaml")
    best = best_ranked_trial(study)
    gap = build_study_gap(study)
    assert gap is not None and gap.trial == best.number and gap.level == 16
    modelled = step_time_ms(sim_config_of(space, best.params), 16)
    assert gap.step_ms == pytest.approx(modelled, rel=0.05)
    assert gap.needed_step_ms == pytest.approx(16.0)
    assert gap.step_speedup == pytest.approx(modelled / 16.0, rel=0.05)  # ~38-44x on this space
    # the report and `show` print these same numbers
    report = demo.run("report", STUDY)
    assert report.returncode == 0, report.stderr
    markdown = (demo.workdir / "results" / STUDY / "report.md").read_text()
    line = f"step needed at C=16: 16.0 ms (have {gap.step_ms:.1f} ms): {gap.step_speedup:.1f}x faster steps missing"
    assert line in markdown
    show = demo.run("show", STUDY)
    assert show.returncode == 0 and line in " ".join(show.stdout.split())


def test_leaderboard_exports_round_trip_with_provenance(demo):
    result = demo.run("leaderboard", STUDY, "--csv", "lb.csv", "--json-file", "lb.json", "--parquet", "lb.parquet")
    assert result.returncode == 0, result.stderr
    parquet = pd.read_parquet(demo.workdir / "lb.parquet")
    dtypes = {name: str(dtype) for name, dtype in parquet.dtypes.items()}
    csv = pd.read_csv(demo.workdir / "lb.csv", dtype=dtypes)
    records = pd.read_json(demo.workdir / "lb.json", orient="records", dtype=dtypes)
    pd.testing.assert_frame_equal(csv, parquet, check_exact=False, rtol=1e-12)
    pd.testing.assert_frame_equal(records, parquet, check_exact=False, rtol=1e-12)
    assert len(parquet) == len(demo.study(STUDY).trials) and parquet["trial"].is_unique
    assert set(parquet["engine_version"]) == {sweeper.__version__} and set(parquet["engine"]) == {"sim"}
    assert parquet["gpu_model"].str.contains("RTX PRO 6000").all()
    assert set(parquet["host"].dropna()) == {"local"} and set(parquet["sweeper_version"]) == {sweeper.__version__}
    ranked = parquet[parquet["rank"].notna()]
    assert list(ranked["rank"]) == list(range(1, len(ranked) + 1))
    assert ranked["duplicate_of"].isna().all() and ranked["c16_valid"].all()
    assert ranked["rank_value"].is_monotonic_decreasing

    by_c1 = demo.run("leaderboard", STUDY, "--level", "1", "--feasible-only", "--top", "2", "--json-file", "c1.json")
    assert by_c1.returncode == 0, by_c1.stderr
    rows = json.loads((demo.workdir / "c1.json").read_text())
    assert 1 <= len(rows) <= 2 and all(r["rank_level"] == 1 and r["rank"] is not None for r in rows)
    assert [r["rank_value"] for r in rows] == sorted((r["c1_output_tok_s"] for r in rows), reverse=True)
    bad = demo.run("leaderboard", STUDY, "--level", "3")
    assert bad.returncode == 2 and "--level 3" in bad.stderr and "Traceback" not in bad.stderr


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_study_opens_in_optuna_dashboard(demo):
    dashboard = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent)) or shutil.which("optuna-dashboard")
    if dashboard is None:
        pytest.skip("optuna-dashboard not installed (the test extra installs it)")
    port = free_port()
    db = demo.workdir / "results" / STUDY / "study.db"
    server = subprocess.Popen([dashboard, f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                summaries = get_json(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "optuna-dashboard did not answer"
                time.sleep(0.25)
        study = next(s for s in summaries if s["study_name"] == STUDY)
        assert study["directions"] == ["maximize"]
        detail = get_json(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}")
        assert detail["objective_names"] == ["output_throughput@c16"]
        assert len(detail["trials"]) == len(demo.study(STUDY).trials)
    finally:
        server.terminate()
        server.wait(timeout=20)
