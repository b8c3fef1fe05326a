"""CPU isolation between the system under test and the load that drives it, with cgroups.

On a shared 2-core host the load generator and the server compete for the same cores, and a
generator that is starved sends late and measures late. `nice` does not settle it here: with
`kernel.sched_autogroup_enabled=1` every process started in a session of its own (as the
benchmark starts each system) is its own scheduling group, and niceness only orders
processes inside a group (`python -m loadtest.autogroup_check` measures it).

cgroups do settle it. Two sibling groups under one parent:
  - `driver`: the benchmark itself and everything it starts that is not the system under
    test (locust, dynalite, which stands in for a remote DynamoDB);
  - `system`: the system under test, whichever it is, with its whole process tree.
The driver group weighs DRIVER_WEIGHT times the system group: when both want CPU, the
driver gets its share first, so offered load and client timings do not depend on how hard
the server loads the host. When the driver is idle the system may use every core. Each
system gets exactly the same treatment.

cgroup v2 (`cpu.weight`) and v1 (`cpu.shares`) are both handled; without write access
(not root, or no cpu controller) the benchmark runs unisolated and its report says so.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
# One parent group per benchmark process (offers-bench-<pid>): two runs, or a test beside a
# running benchmark, never share (or tear down) each other's groups.
GROUP = "offers-bench"
# cgroup v1 cpu.shares of the system group (the kernel's default weight); the driver's is
# DRIVER_WEIGHT times that. v2's cpu.weight default is 100 on the same scale.
SYSTEM_SHARES = 1024
DRIVER_WEIGHT = 8


def _group_name() -> str:
    return f"{GROUP}-{os.getpid()}"


@dataclass(frozen=True)
class _Layout:
    version: str  # "v1" or "v2"
    parent: Path  # where the benchmark's own group goes
    root: Path  # the hierarchy's root (to give processes back at the end)


def _layout() -> _Layout | None:
    if (CGROUP_ROOT / "cgroup.controllers").is_file():
        if "cpu" in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
            return _Layout("v2", CGROUP_ROOT / _group_name(), CGROUP_ROOT)
        return None
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.shares").is_file():
        return _Layout("v1", v1 / _group_name(), v1)
    return None


class CpuIsolation:
    """`with CpuIsolation() as iso:` puts this process in the driver group; start the system
    under test with `preexec_fn=iso.enter_system` so its whole tree lands in the system group.
    """

    def __init__(self, enabled: bool = True) -> None:
        self._wanted = enabled
        self._layout: _Layout | None = None
        self.reason = "disabled (--no-isolation)" if not enabled else ""

    @property
    def active(self) -> bool:
        return self._layout is not None

    def describe(self) -> dict[str, Any]:
        if self._layout is None:
            return {"method": "none", "reason": self.reason}
        return {
            "method": f"cgroup {self._layout.version}",
            "parent": str(self._layout.parent),
            "groups": {"driver": "benchmark, locust, dynalite", "system": "system under test"},
            "driver_weight_vs_system": DRIVER_WEIGHT,
            "cpu_limit": "none: the system may use every core the driver leaves idle",
        }

    def __enter__(self) -> CpuIsolation:
        if not self._wanted:
            return self
        layout = _layout()
        if layout is None:
            self.reason = "no writable cgroup cpu controller on this host"
            return self
        try:
            self._create(layout)
            _move(os.getpid(), layout.parent / "driver")
        except OSError as exc:
            self.reason = f"cgroups not usable: {exc}"
            self._remove(layout)
            return self
        self._layout = layout
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._layout is not None:
            self._remove(self._layout)
            self._layout = None

    def enter_system(self) -> None:
        """preexec_fn: runs in the child between fork and exec; its descendants follow."""
        if self._layout is not None:
            _move(os.getpid(), self._layout.parent / "system")

    def _create(self, layout: _Layout) -> None:
        layout.parent.mkdir(exist_ok=True)
        if layout.version == "v2":
            # Children of the parent get a cpu controller only if the parent delegates it.
            for group in (layout.root, layout.parent):
                (group / "cgroup.subtree_control").write_text("+cpu")
        for name, weight in (("system", 1), ("driver", DRIVER_WEIGHT)):
            group = layout.parent / name
            group.mkdir(exist_ok=True)
            if layout.version == "v2":
                (group / "cpu.weight").write_text(str(100 * weight))
            else:
                (group / "cpu.shares").write_text(str(SYSTEM_SHARES * weight))

    def _remove(self, layout: _Layout) -> None:
        """Give every process left in the groups back to the root, then delete the groups."""
        for name in ("system", "driver"):
            group = layout.parent / name
            if not group.is_dir():
                continue
            for _ in range(3):  # a process may fork while we move its parent
                try:
                    pids = (group / "cgroup.procs").read_text().split()
                except OSError:  # the group went away
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):  # exited in between
                        _move(int(pid), layout.root)
                time.sleep(0.1)
            with contextlib.suppress(OSError):
                group.rmdir()
        with contextlib.suppress(OSError):
            layout.parent.rmdir()


def _move(pid: int, group: Path) -> None:
    (group / "cgroup.procs").write_text(str(pid))
