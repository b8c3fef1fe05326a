"""Where a killed replica's way back went, step by step, read from the Ray session's own logs.

The restart scenarios time the way back where callers see it (HAProxy listing the new
replica). This splits that time at what each process logs on the way, so a run says which
step to work on, not only how long the whole took:

  noticed              the kill, to Serve's controller finding the actor dead (it finds out
                       at its next health check of the replica: `health_check_period_s`)
  scheduled            to the controller starting the replacement
  worker process       to the raylet starting its worker process
  interpreter and Ray  to that process's core worker starting: Python, and `import ray`
                       twice (Ray starts every worker as `setup_worker.py`, which execs
                       the worker itself, here under `nice`)
  Serve and app        to the replica's own log opening (Serve's "Started initializing
                       replica.", just before the constructor runs): the actor's creation
                       task, `import ray.serve` and the application's modules
  constructor          to the replica logging itself ready (`... ready in N ms`)
  marked running       to the controller logging it started

What is left of the time at HAProxy after the last replacement is running (`haproxy_s`) is
Serve's proxy rewriting and reloading HAProxy's configuration with the new replicas. A step
whose log line is missing (a rotated log, a replica that never became ready) is left out,
never guessed.

Ray's and Serve's logs carry local wall-clock times without a zone; the kill time is taken
as a wall-clock time on the same host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

STEPS = (
    "noticed",
    "scheduled",
    "worker process",
    "interpreter and Ray",
    "Serve and app",
    "constructor",
    "marked running",
)

SERVE_TIME = r"\w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "  # Serve's: LEVEL date time
CORE_TIME = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "  # the raylet's and core worker's


@dataclass(frozen=True)
class ReplicaStart:
    """One replacement replica's way back: seconds per step (STEPS order, missing ones left
    out) and from the kill to the controller marking it running."""

    replica: str
    pid: int | None
    steps_s: dict[str, float]
    running_after_s: float | None


def session_dirs(cmdlines: Iterable[list[str]]) -> list[Path]:
    """The session folders of the raylets among these command lines (one per Ray node)."""
    found: list[Path] = []
    for args in cmdlines:
        if not args or "raylet" not in Path(args[0]).name:
            continue
        for arg in args:
            match = re.search(r"--session[_-]dir=(\S+)", arg)
            if match and Path(match.group(1)) not in found:
                found.append(Path(match.group(1)))
    return found


def _stamp(pattern: str, line: str) -> datetime | None:
    match = re.match(pattern, line)
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f") if match else None


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _first(paths: Iterable[Path]) -> list[str]:
    for path in paths:
        lines = _lines(path)
        if lines:
            return lines
    return []


def replica_starts(
    sessions: list[Path],
    app: str,
    deployment: str,
    killed_at: datetime,
    until: datetime | None = None,
) -> list[ReplicaStart]:
    """Every replica of `app`'s `deployment` the controller started from `killed_at` until
    `until` (the next kill, if any), step by step. A start for another reason in that time
    (the autoscaler's) is counted too."""
    logs = [s / "logs" for s in sessions]
    controller = [
        line
        for folder in logs
        for path in sorted(folder.glob("serve/controller_*.log"))
        if re.fullmatch(r"controller_\d+\.log", path.name)
        for line in _lines(path)
    ]
    # Nodes sharing a temp dir share a session folder: the second raylet writes raylet.1.out.
    raylet = [line for f in logs for path in sorted(f.glob("raylet*.out")) for line in _lines(path)]
    who = rf"Replica\(id='(\w+)', deployment='{re.escape(deployment)}', app='{re.escape(app)}'\)"

    def within(line: str) -> datetime | None:
        at = _stamp(SERVE_TIME, line)
        if at is None or at < killed_at or (until is not None and at >= until):
            return None
        return at

    crashes = sorted(
        at for line in controller if re.search(who + " crashed", line) and (at := within(line))
    )
    starts: list[ReplicaStart] = []
    for line in controller:
        match = re.search(r"-- Starting " + who, line)
        started = within(line) if match else None
        if match is None or started is None:
            continue
        # The n-th replacement answers the n-th death noticed (Serve starts one per death).
        noticed = crashes[len(starts)] if len(starts) < len(crashes) else None
        replica = match.group(1)
        mine = f"Replica(id='{replica}'"
        running_line = next(
            (x for x in controller if mine in x and "started successfully" in x), None
        )
        pid_match = re.search(r"PID: (\d+)", running_line or "")
        pid = int(pid_match.group(1)) if pid_match else None
        spawn = _spawned(raylet, pid, started)
        core = (
            _first(p for f in logs for p in f.glob(f"python-core-worker-{spawn[1]}_{pid}.log"))
            if spawn
            else []
        )
        own_log = f"serve/replica_{app}_{deployment}_{replica}.log"
        own = _first(p for f in logs for p in f.glob(own_log))
        ready_line = next((x for x in own if " ready in " in x), None)
        marks = [
            killed_at,
            noticed,
            started,
            spawn[0] if spawn else None,
            _stamp(CORE_TIME, core[0]) if core else None,
            _stamp(SERVE_TIME, own[0]) if own else None,
            _stamp(SERVE_TIME, ready_line) if ready_line else None,
            _stamp(SERVE_TIME, running_line) if running_line else None,
        ]
        starts.append(
            ReplicaStart(
                replica=replica,
                pid=pid,
                steps_s=_steps(marks),
                running_after_s=(
                    round((marks[-1] - killed_at).total_seconds(), 2) if marks[-1] else None
                ),
            )
        )
    return starts


def _spawned(raylet: list[str], pid: int | None, since: datetime) -> tuple[datetime, str] | None:
    """When the raylet started worker `pid`, from `since` on (a pid can be reused), and the
    worker id its core worker's log is named by."""
    for line in raylet:
        if pid is None or f"Started worker process with pid {pid} " not in line:
            continue
        at = _stamp(CORE_TIME, line)
        worker = re.search(r"worker_id=(\w+)", line)
        if at is not None and at >= since and worker is not None:
            return at, worker.group(1)
    return None


def traced(starts: list[ReplicaStart], listed_after_s: float | None) -> list[dict[str, Any]]:
    """The starts as the report keeps them, each with `haproxy_s`: from the last of them
    marked running to HAProxy listing them all (`listed_after_s`, timed by the scenario)."""
    running = [s.running_after_s for s in starts if s.running_after_s is not None]
    haproxy = (
        round(listed_after_s - max(running), 2) if running and listed_after_s is not None else None
    )
    return [{**asdict(s), "haproxy_s": haproxy} for s in starts]


def _steps(marks: list[datetime | None]) -> dict[str, float]:
    """Seconds between consecutive marks, each named by the step it ends. A missing mark
    leaves out both steps it bounds: no step is given another's time."""
    steps: dict[str, float] = {}
    for name, (start, end) in zip(STEPS, zip(marks, marks[1:], strict=False), strict=True):
        if start is not None and end is not None:
            steps[name] = round((end - start).total_seconds(), 2)
    return steps


def median_steps(starts: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each step, and of `haproxy_s`, over traced replica starts (`traced`'s
    shape), each over the starts that have it."""
    out: dict[str, float] = {}
    for key in (*STEPS, "haproxy_s"):
        values: list[float] = [
            value
            for s in starts
            if (value := s["steps_s"].get(key, s.get(key) if key == "haproxy_s" else None))
            is not None
        ]
        if values:
            out[key] = round(median(values), 2)
    return out
