"""Ctrl-C a sweep while readers poll its SQLite study and busy loops take the CPU (issue 32).

READERS processes reading the study as `sweeper show --watch --interval 0.2` does, BUSY processes
spinning on the cores, and each run a SIGINT to
- `--mode storage` (default): the sweep's storage traffic alone (STORAGE_CHILD below: trials
  recording a stage and a level every few ms, heartbeats every 0.2 s), at a random moment within
  SPREAD s of its start; bound 10 s;
- `--mode sweep`: `sweeper sweep` of the tiny simulator space, once a trial is in its load stage,
  at the first write of the study after a random moment within SPREAD s; bound: the space's stop
  grace of 5 s + 10 s.
A run fails when the process does not end with 130 within the bound, its stderr shows a storage
error (a dead heartbeat thread, "database is locked"), or a trial is still RUNNING in the study
after it ended. (Optuna's warnings with the tracebacks of failed trials are expected there.)

    bench/storage_contention.py --runs 100 [--mode storage|sweep] [--readers 8] [--busy 2] [--root /tmp/old32]

`--root`: the checkout whose sweeper runs (an old commit's worktree, to measure before a fix).
Prints one JSON line per run, then the failure count; numbers in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from tests.support.spaces import TINY_SPACE  # noqa: E402

STOP_GRACE_S = 5  # the tiny space's launch.stop_grace_s
BOUND_S = STOP_GRACE_S + 10
# Enough budget that the sweep is still running when the signal comes.
SPACE = TINY_SPACE.replace("budget: {trials: 5}", "budget: {trials: 40}")


def start(root: Path, work: Path, *args: str, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "sweeper.cli", *args], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)


def in_load_stage(study_dir: Path) -> bool:
    return any(t.joinpath("samples").exists() and not t.joinpath("outcome.json").exists()
               for t in study_dir.glob("trials/*"))


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def wait_for_a_write(db: Path, timeout_s: float) -> bool:
    """Until the sweep writes its study: a rollback journal exists (a write transaction is open)
    or the WAL file changed (one just committed; a trial's records come several in a row)."""
    journal, wal = db.with_name(db.name + "-journal"), db.with_name(db.name + "-wal")

    def wal_stamp():
        try:
            stat = wal.stat()
            return stat.st_mtime_ns, stat.st_size
        except FileNotFoundError:
            return None

    before = wal_stamp()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if journal.exists() or wal_stamp() != before:
            return True
        time.sleep(0.001)
    return False


def running_trials(db: Path) -> int:
    with sqlite3.connect(db, timeout=60) as conn:
        return conn.execute("SELECT count(*) FROM trials WHERE state = 'RUNNING'").fetchone()[0]


def one_run(root: Path, readers: int, busy: int, spread_s: float, rng: random.Random) -> dict:
    work = Path(tempfile.mkdtemp(prefix="contention-"))
    (work / "hosts.yaml").write_text((root / "hosts.yaml").read_text())
    (work / "tiny.yaml").write_text(SPACE)
    study_dir = work / "results" / "c"
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    sweep = start(root, work, "sweep", "tiny.yaml", "--study", "c", stderr=(work / "sweep.err").open("w"))
    watchers: list[subprocess.Popen] = []
    record: dict = {"work": str(work)}
    try:
        wait_until(lambda: (study_dir / "study.db").exists(), 60)
        watchers = [start(root, work, "show", "c", "--watch", "--interval", "0.2") for _ in range(readers)]
        if not wait_until(lambda: in_load_stage(study_dir), 120):
            return {**record, "fail": True, "why": "no trial reached its load stage"}
        time.sleep(rng.uniform(0, spread_s))
        record["at_write"] = wait_for_a_write(study_dir / "study.db", spread_s)
        sent = time.monotonic()
        os.kill(sweep.pid, signal.SIGINT)
        try:
            record["rc"] = sweep.wait(60)
        except subprocess.TimeoutExpired:
            record["rc"] = None
        record["took_s"] = round(time.monotonic() - sent, 1)
    finally:
        for proc in watchers:
            proc.send_signal(signal.SIGINT)
        for proc in spinners:
            proc.kill()
        for proc in [*watchers, *spinners]:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    return judge(record, (work / "sweep.err").read_text(), study_dir / "study.db", BOUND_S)


# The sweep's storage traffic without the servers: trials of a stand-in objective that records a
# stage and a level back to back (what a trial's TrialWatch does, far more often), the storage's
# heartbeat every 0.2 s, a Ctrl-C recording the trial interrupted, all as run_sweep does at the
# checkout under test (it wraps study.optimize in interrupted_trials_failed where it has it).
STORAGE_CHILD = """
import contextlib, importlib, importlib.util, sys, time, optuna
from sweeper.cli.common import interrupts_as_keyboard
try:  # this checkout's layout (issue 31's study/), else an older commit's search/study.py
    from sweeper.study import runs as sweeper_study
    from sweeper.study.storage import open_storage
except ImportError:
    from sweeper.search import study as sweeper_study
    open_storage = sweeper_study.open_storage
optuna.logging.set_verbosity(optuna.logging.ERROR)
storage = open_storage(sys.argv[1], heartbeat_s=0.2)
study = optuna.create_study(study_name="c", storage=storage)
has_interrupts = importlib.util.find_spec("sweeper.interrupts") is not None
interruptible = importlib.import_module("sweeper.interrupts").interruptible if has_interrupts else contextlib.nullcontext
guard = getattr(sweeper_study, "interrupted_trials_failed", lambda study: contextlib.nullcontext())

def objective(trial):  # make_objective's shape: its body interruptible, a Ctrl-C recorded
    with interruptible():
        try:
            for n in range(20):
                trial.set_user_attr("stage", f"load {n}")
                trial.report(float(n), step=n)
            return 1.0
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            raise

try:
    with interrupts_as_keyboard(), guard(study):
        open(sys.argv[2], "w").close()
        study.optimize(objective, n_trials=100000)
except KeyboardInterrupt:
    print(f"interrupted, recorded at {time.time():.3f}", file=sys.stderr, flush=True)
    sys.exit(130)
"""


# A `sweeper show` of the current run's study every 0.2 s (the code of `show --watch`, kept running
# across runs: it follows the URL in the pointer file).
READER = """
import sys, time, optuna
from pathlib import Path
from sweeper.results.show import build_show_record
try:  # this checkout's layout (issue 31's study/), else an older commit's search/study.py
    from sweeper.study.storage import open_storage
except ImportError:
    from sweeper.search.study import open_storage
optuna.logging.set_verbosity(optuna.logging.ERROR)
pointer, url = Path(sys.argv[1]), None
while True:
    try:
        if pointer.read_text() != url:
            url = pointer.read_text()
            storage = open_storage(url)
        build_show_record(optuna.load_study(study_name="c", storage=storage))
    except Exception:
        pass  # between runs: the next study does not exist yet
    time.sleep(0.2)
"""


class StorageLoad:
    """The readers and busy loops of `--mode storage`, started once for all its runs."""

    def __init__(self, root: Path, readers: int, busy: int):
        self.root, self.base = root, Path(tempfile.mkdtemp(prefix="contention-"))
        self.pointer = self.base / "current"
        self.pointer.write_text("")
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        self.procs += [subprocess.Popen([sys.executable, "-c", READER, str(self.pointer)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for _ in range(readers)]

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()

    def run(self, n: int, spread_s: float, rng: random.Random) -> dict:
        """Ctrl-C the stand-in at a random moment within SPREAD seconds of its first trial."""
        work = self.base / str(n)
        db = work / "study.db"
        work.mkdir()
        self.pointer.write_text(f"sqlite:///{db}")
        ready = work / "ready"
        child = subprocess.Popen([sys.executable, "-c", STORAGE_CHILD, f"sqlite:///{db}", str(ready)],
                                 env={**os.environ, "PYTHONPATH": str(self.root)}, cwd=work,
                                 stdout=subprocess.DEVNULL, stderr=(work / "sweep.err").open("w"))
        record: dict = {"work": str(work)}
        try:
            if not wait_until(lambda: ready.exists() or child.poll() is not None, 120) or not ready.exists():
                # the harness, not what is measured: said apart, with what the stand-in printed
                tail = (work / "sweep.err").read_text()[-500:]
                return {**record, "fail": True, "harness": True,
                        "why": f"the stand-in never started (exit {child.poll()}): {tail}"}
            time.sleep(rng.uniform(0, spread_s))
            sent, record["sent_at"] = time.monotonic(), round(time.time(), 3)
            child.send_signal(signal.SIGINT)
            try:
                record["rc"] = child.wait(60)
            except subprocess.TimeoutExpired:
                record["rc"] = None
            record["took_s"] = round(time.monotonic() - sent, 1)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        return judge(record, (work / "sweep.err").read_text(), db, bound_s=10)


def judge(record: dict, stderr: str, db: Path, bound_s: float) -> dict:
    """A heartbeat that logs a lost beat and goes on is the fix working; a traceback through the
    storage, a dead heartbeat thread or Optuna's own bookkeeping cut short is not."""
    record["heartbeat_died"] = "Exception in thread" in stderr and "_record_heartbeat" in stderr
    record["beats_lost"] = stderr.count("not recorded, the next one tries again")
    record["storage_error"] = "Traceback" in stderr and any(
        s in stderr for s in ("OperationalError", "StorageInternalError", "StorageBusy", "UnboundLocalError"))
    record["running_after"] = running_trials(db)
    record["fail"] = bool(record["rc"] != 130 or record["took_s"] > bound_s or record["heartbeat_died"]
                          or record["storage_error"] or record["running_after"])
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--spread", type=float, default=3.0, help="seconds over which the SIGINT moment is drawn")
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose sweeper runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=("sweep", "storage"), default="storage",
                        help="sweep: `sweeper sweep` of the simulator; storage: its storage traffic alone")
    args = parser.parse_args()
    # Started in the background by a shell, this process ignores SIGINT and so would every sweep it
    # starts (an ignored signal is inherited): a handled one is reset to the default in a child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = random.Random(args.seed)
    failures = lost = 0
    load = StorageLoad(args.root.resolve(), args.readers, args.busy) if args.mode == "storage" else None
    try:
        for n in range(args.runs):
            record = (load.run(n, args.spread, rng) if load else
                      one_run(args.root.resolve(), args.readers, args.busy, args.spread, rng))
            lost += bool(record.get("harness"))
            failures += record["fail"] and not record.get("harness")
            print(json.dumps({"run": n, **record}), flush=True)
    finally:
        if load:
            load.close()
    print(f"{failures} of {args.runs - lost} runs failed (mode {args.mode}, readers {args.readers}, busy loops "
          f"{args.busy}, root {args.root}; {lost} lost to the harness)", flush=True)


if __name__ == "__main__":
    main()
