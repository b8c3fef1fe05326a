"""CPU and memory of a system's whole process tree, sampled while it runs."""

from __future__ import annotations

import threading
import time

import psutil

from loadtest.systems import ManagedProcess


class ResourceMonitor:
    """Samples the tree's total RSS (keeping the peak) and cumulative CPU seconds."""

    def __init__(self, process: ManagedProcess, interval_s: float = 0.5) -> None:
        self._process = process
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="resources")
        # CPU seconds of processes seen so far, by pid, so exited children still count.
        self._cpu_by_pid: dict[int, float] = {}
        self.peak_rss_mb = 0.0

    def _sample(self) -> None:
        rss = 0
        for proc in self._process.tree():
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    self._cpu_by_pid[proc.pid] = times.user + times.system
            except psutil.Error:
                continue
        self.peak_rss_mb = max(self.peak_rss_mb, rss / 2**20)

    def cpu_seconds(self) -> float:
        self._sample()
        return sum(self._cpu_by_pid.values())

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def __enter__(self) -> ResourceMonitor:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()


class CpuWindow:
    """Average cores a system used between enter and exit."""

    def __init__(self, monitor: ResourceMonitor) -> None:
        self._monitor = monitor
        self.cores = 0.0

    def __enter__(self) -> CpuWindow:
        self._cpu0, self._t0 = self._monitor.cpu_seconds(), time.monotonic()
        return self

    def __exit__(self, *exc_info) -> None:
        elapsed = time.monotonic() - self._t0
        self.cores = (self._monitor.cpu_seconds() - self._cpu0) / elapsed if elapsed > 0 else 0.0
