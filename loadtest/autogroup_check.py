"""Does `nice` order two CPU-bound processes that run in different sessions? Do cgroups?

    .venv/bin/python -m loadtest.autogroup_check

Pins two busy loops to one core, one at nice 15 and one at nice 0, first each in a session
of its own (as the benchmark starts the systems it measures), then both in ours, and prints
the share of the core each got. With kernel.sched_autogroup_enabled=1 the kernel first
shares CPU between sessions (autogroups), so niceness only orders processes inside a
session. Then the benchmark's own isolation (loadtest.harness.isolation): both loops in sessions of
their own, one in the system-under-test cgroup and one in the driver's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from loadtest.harness.isolation import DRIVER_WEIGHT, CpuIsolation

BUSY = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"


def shares(
    own_sessions: bool,
    core: int = 0,
    seconds: float = 6.0,
    lower: Callable[[], None] = lambda: os.nice(15),
) -> tuple[float, float]:
    """CPU share of (the loop `lower` ran in, the other loop) over the middle of their run."""
    code = BUSY.format(seconds=seconds)
    pinned = ["taskset", "-c", str(core), sys.executable, "-c", code]
    low = subprocess.Popen(pinned, preexec_fn=lower, start_new_session=own_sessions)
    high = subprocess.Popen(pinned, start_new_session=own_sessions)
    procs = [psutil.Process(low.pid), psutil.Process(high.pid)]
    time.sleep(1.0)
    before = [sum(p.cpu_times()[:2]) for p in procs]
    window = seconds - 2.0
    time.sleep(window)
    after = [sum(p.cpu_times()[:2]) for p in procs]
    low.wait()
    high.wait()
    used = [(b - a) / window for a, b in zip(before, after, strict=True)]
    return round(used[0], 2), round(used[1], 2)


def main() -> int:
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    setting = autogroup.read_text().strip() if autogroup.exists() else "absent"
    print(f"kernel.sched_autogroup_enabled = {setting}")
    print("core share (nice 15, nice 0), each in its own session:", shares(own_sessions=True))
    print("core share (nice 15, nice 0), both in one session:    ", shares(own_sessions=False))
    with CpuIsolation() as isolation:
        if not isolation.active:
            print("cgroup isolation not available:", isolation.describe()["reason"])
            return 0
        # This process is in the driver group now; the second loop stays there with it.
        split = shares(own_sessions=True, lower=isolation.enter_system)
        print(f"core share (system cgroup, driver cgroup), own sessions: {split}", end=" ")
        print(f"[{isolation.describe()['method']}, driver weight x{DRIVER_WEIGHT}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
