"""Deployed replicas give way on the CPU to Serve's own processes (app.adapters.cpu_priority)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config.settings import Settings
from tests.integration.conftest import APP_NAME

pytestmark = pytest.mark.integration

PROC = Path("/proc")


def processes_titled(prefix: str) -> list[Path]:
    """/proc/<pid> of every process whose command line (Ray's process title) starts so."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except OSError:
            continue
        if title.startswith(prefix):
            found.append(entry)
    return found


def thread_niceness(process: Path) -> list[int]:
    """Each live thread's niceness: field 19 of /proc/<pid>/task/<tid>/stat."""
    values = []
    for task in (process / "task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        # After the command name in parentheses, which may itself hold spaces.
        values.append(int(stat.rsplit(")", 1)[1].split()[16]))
    return values


@pytest.mark.skipif(not PROC.joinpath("self", "task").is_dir(), reason="Linux /proc")
def test_every_replica_thread_runs_nicer_than_serves_controller(serve_app):
    niceness = Settings().replica_niceness
    replicas = processes_titled(f"ray::ServeReplica:{APP_NAME}:")
    # The tiny application: a supervisor and one deployment per member, each one replica.
    assert len(replicas) >= 2, replicas
    for process in replicas:
        assert set(thread_niceness(process)) == {niceness}, process
    # What the replicas give way to keeps Ray's worker niceness: only they moved.
    [controller] = processes_titled("ray::ServeController")
    assert max(thread_niceness(controller)) < niceness
