"""GPU energy of the load: nvidia-smi's power.draw on the server's GPUs, sampled by a background
thread through the GPU gate's own channel (Host.gpu_power: locally or over SSH) while a trial's
ladder runs, integrated over each measured run's wall time.

A sample every `interval_s` (1 s by default: nvidia-smi's power.draw is itself a one-second average
on recent drivers, tests/fixtures/nvidia_smi/h200/power.fields.txt, so faster polling buys nothing;
over SSH each reading is one agent call). A run shorter than the interval still gets a value, from
the readings either side of it (interpolated, held at the ends), so short levels are approximate.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Collection

import numpy as np

Reading = Callable[[], "dict[int, float] | None"]


def energy_j(times: list[float], watts: list[float], t0: float, t1: float) -> float | None:
    """Joules between t0 and t1 (monotonic seconds) from power samples: the trapezoid rule over
    the samples inside, the edges interpolated (held flat beyond the first and last sample).
    None without any sample."""
    if not times or t1 <= t0:
        return None
    inside = [t for t in times if t0 < t < t1]
    grid = np.array([t0, *inside, t1])
    power = np.interp(grid, np.array(times), np.array(watts))
    return float(np.sum((power[1:] + power[:-1]) / 2 * np.diff(grid)))


class PowerMeter:
    """Samples the summed power of `gpus` (all GPUs when None) until stopped; use as a context manager."""

    def __init__(self, read: Reading, gpus: Collection[int] | None, interval_s: float = 1.0) -> None:
        self.read, self.gpus, self.interval_s = read, None if gpus is None else set(gpus), interval_s
        self.times: list[float] = []
        self.watts: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="power-meter", daemon=True)

    def __enter__(self) -> "PowerMeter":
        self._take()  # one reading before the load starts: even the first, shortest run has one
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 65)  # a reading can take the agent's 60 s timeout

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        try:
            reading = self.read()
        except Exception:  # a lost connection: the trial's own stages report it
            return
        if reading:
            total = sum(w for i, w in reading.items() if self.gpus is None or i in self.gpus)
            with self._lock:
                self.times.append(time.monotonic())
                self.watts.append(total)

    def energy_j(self, t0: float, t1: float) -> float | None:
        with self._lock:
            times, watts = list(self.times), list(self.watts)
        return energy_j(times, watts, t0, t1)
