"""Faults of the host rather than of one component: a slower host (CPU-bound neighbours),
a replica's way back after a kill (timed at HAProxy), a feature store that stops answering.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil

from loadtest.harness.haproxy_admin import HAProxyAdmin

RESTART_WATCH_S = 60.0
BUSY = "while True:\n    pass\n"


def neighbours_for(slowdown: float, cores: int | None = None) -> int:
    """CPU-bound processes that leave the service 1/slowdown of the cores when it wants them
    all: with n busy neighbours on c cores and the service's c runnable threads at the same
    niceness, the kernel shares the cores evenly, c / (c + n) each, so n = (slowdown - 1) x
    c. `os.cpu_count()` ignores a cgroup's CPU quota: on a host with one, pass `cores`."""
    cores = cores or os.cpu_count() or 1
    return max(0, round((slowdown - 1.0) * cores))


@contextlib.contextmanager
def cpu_neighbours(count: int, niceness: int | None = None) -> Iterator[list[int]]:
    """`count` busy-looping Python processes for the block, each stopped by its own pid
    afterwards. They run at the replicas' niceness (OFFERS_REPLICA_NICENESS, 19 by default):
    at 0 they would weigh ~70x a replica in the kernel's share and leave the service far
    less than 1/N of the cores, while HAProxy and the client, at higher priority, would
    hardly notice them."""
    if niceness is None:
        from app.config.settings import Settings

        niceness = Settings().replica_niceness
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", f"import os; os.nice({niceness})\n{BUSY}"],
            stdin=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def running_replicas(admin: HAProxyAdmin, backend: str) -> set[str]:
    """Names of the backend's replica servers HAProxy has up (it lists a replica once Serve
    has it running, and keeps it up while its health checks pass)."""
    return {s.name for s in admin.servers(backend) if s.is_replica and s.running}


def seconds_until_replaced(
    admin_of: Any, backend: str, before: set[str], killed_at: float, count: int
) -> float | None:
    """Seconds from `killed_at` until HAProxy has `count` replicas up that were not up
    before the kill: the replaced replicas serving. None if not within RESTART_WATCH_S."""
    while time.monotonic() - killed_at < RESTART_WATCH_S:
        try:
            if len(running_replicas(admin_of(), backend) - before) >= count:
                return round(time.monotonic() - killed_at, 2)
        except (OSError, LookupError, ValueError, psutil.Error):
            pass  # HAProxy is being reloaded by Serve: ask again
        time.sleep(0.05)
    return None


def pause_for(pid: int, seconds: float) -> None:
    """SIGSTOP `pid` now and SIGCONT it after `seconds`, on a thread: the process holds its
    connections and answers nothing meanwhile (a store that stopped answering)."""
    os.kill(pid, signal.SIGSTOP)

    def resume() -> None:
        time.sleep(seconds)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    threading.Thread(target=resume, daemon=True, name=f"resume-{pid}").start()


def listening_pid(port: int) -> int | None:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None
