"""Idle CPU of the host a replica runs on: what a replica added there would really get.

Read from the kernel's counters (/proc/stat) between two calls, in cores (2.0 = two cores
idle). Linux only; elsewhere, or before the second read, it is unknown (None). A container
sees the node's counters, not its cgroup's share: on a shared node it is the room the node
has, which is what a new replica placed there competes for.
"""

from __future__ import annotations

import os
from pathlib import Path

STAT = Path("/proc/stat")


def _read(path: Path) -> tuple[int, int] | None:
    """(idle + iowait, total) jiffies over all CPUs."""
    try:
        first = path.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    return values[3] + values[4], sum(values)


class IdleCpu:
    def __init__(self, path: Path = STAT, cpus: int | None = None) -> None:
        self._path = path
        self._cpus = cpus or os.cpu_count() or 1
        self._last = _read(path)

    def cores(self) -> float | None:
        """Cores idle on average since the previous call (or since creation)."""
        now = _read(self._path)
        last, self._last = self._last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return self._cpus * (now[0] - last[0]) / (now[1] - last[1])
