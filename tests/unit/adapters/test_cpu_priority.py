"""A replica's threads, and its node's raylet, give way on the CPU: each raised to the niceness
asked, never lowered.

Each case runs in a child process of its own: niceness is per thread and cannot be lowered
again without privilege, so the test process itself is never touched.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.adapters.cpu_priority import give_way, raylet_gives_way, start_niced

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

# Starts a thread, optionally sets the process's first niceness, calls give_way, then starts
# one more thread from the main thread; prints every thread's niceness and what give_way said.
CHILD = """
import json, os, sys, threading
from app.adapters.cpu_priority import give_way

start, target = int(sys.argv[1]), int(sys.argv[2])
for tid in [int(t) for t in os.listdir("/proc/self/task")]:
    os.setpriority(os.PRIO_PROCESS, tid, start)
hold = threading.Event()
before = threading.Thread(target=hold.wait)
before.start()
raised = give_way(target)
after_nice = []
after = threading.Thread(target=lambda: after_nice.append(os.getpriority(os.PRIO_PROCESS, 0)))
after.start(); after.join()
nice = {}
for t in os.listdir("/proc/self/task"):
    try:
        nice[t] = os.getpriority(os.PRIO_PROCESS, int(t))
    except ProcessLookupError:
        pass  # `after`, joined but not yet gone from the list
hold.set(); before.join()
print(json.dumps({"raised": raised, "threads": sorted(nice.values()), "later": after_nice[0]}))
"""


def run_child(start: int, target: int) -> dict:
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(start), str(target)],
        cwd=root, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux per-thread niceness")
def test_every_thread_and_every_later_thread_gets_the_niceness():
    result = run_child(start=15, target=19)
    # The main thread and the one started before: both raised, and nothing left below.
    assert result["raised"] >= 2
    assert result["threads"] == [19] * len(result["threads"])
    assert result["later"] == 19


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux per-thread niceness")
def test_a_thread_already_nicer_is_left_alone():
    result = run_child(start=19, target=16)
    assert result["raised"] == 0
    assert result["threads"] == [19] * len(result["threads"])


def test_without_a_thread_list_nothing_changes(tmp_path):
    assert give_way(19, tasks=tmp_path / "missing") == 0


def test_a_thread_that_ended_or_a_refused_call_never_stops_the_replica(
    tmp_path, monkeypatch, caplog
):
    # Two threads listed; one ends before it is set, the sandbox refuses the other.
    for tid in ("101", "102"):
        (tmp_path / tid).mkdir()

    def refuse(_which: int, tid: int, _niceness: int) -> None:
        if tid == 101:
            raise ProcessLookupError(3, "No such process")
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr("app.adapters.cpu_priority.os.getpriority", lambda _w, _t: 0)
    monkeypatch.setattr("app.adapters.cpu_priority.os.setpriority", refuse)
    with caplog.at_level("WARNING", logger="app.adapters.cpu_priority"):
        assert give_way(19, tasks=tmp_path) == 0
    # The ended thread is skipped quietly; the refusal is logged, not raised.
    assert [r.getMessage() for r in caplog.records] == [
        "could not raise thread 102 to niceness 19: [Errno 38] Function not implemented"
    ]


@pytest.mark.skipif(shutil.which("nice") is None, reason="needs the `nice` command")
def test_a_worker_started_niced_runs_at_the_niceness_from_its_first_line():
    """The runtime_env start_niced gives is what Ray runs: `exec <py_executable> <worker>` in
    bash (ray._private.runtime_env.context). The started interpreter reports its niceness
    before any code of its own could raise it."""
    runtime_env = start_niced(17, command=shlex.quote(sys.executable))
    command = f"exec {runtime_env['py_executable']} -c 'import os; print(os.nice(0))'"
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    assert int(out.stdout) == 17


def test_nothing_to_raise_or_no_nice_command_starts_the_worker_as_ray_does(monkeypatch):
    assert start_niced(0) == {}
    monkeypatch.setattr("app.adapters.cpu_priority.shutil.which", lambda _name: None)
    assert start_niced(19) == {}


def test_paths_with_spaces_are_quoted_for_the_shell(monkeypatch):
    monkeypatch.setattr("app.adapters.cpu_priority.shutil.which", lambda _name: "/opt/my bin/nice")
    monkeypatch.setattr("app.adapters.cpu_priority.sys.executable", "/opt/my env/bin/python")
    assert start_niced(19) == {"py_executable": "'/opt/my bin/nice' -n 19 '/opt/my env/bin/python'"}
    # A command given is a shell command already: used as it is, after `nice`.
    assert start_niced(19, command="'/opt/my env/bin/python' -m mod") == {
        "py_executable": "'/opt/my bin/nice' -n 19 '/opt/my env/bin/python' -m mod"
    }


def niceness_of_every_thread(pid: int) -> set[int]:
    values = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            values.add(os.getpriority(os.PRIO_PROCESS, int(task.name)))
        except ProcessLookupError:
            continue
    return values


@pytest.fixture
def parent_named(tmp_path):
    """Start a process whose command is the given name (a copy of `sleep`), as the parent a
    replica would find; stopped by its own handle."""
    started: list[subprocess.Popen] = []

    def start(name: str) -> int:
        program = tmp_path / name
        shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
        started.append(subprocess.Popen([str(program), "60"]))
        pid = started[-1].pid
        # Popen may return before the child's exec shows in /proc (it reads "python" a
        # moment after, under load): wait for the name a replica would read.
        comm = Path(f"/proc/{pid}/comm")
        for _ in range(500):
            if comm.read_text().strip() == name[:15]:
                return pid
            time.sleep(0.01)
        raise AssertionError(f"{program} never showed as {name!r} in {comm}")

    yield start
    for process in started:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux per-thread niceness")
def test_the_raylet_parent_is_raised_to_the_niceness_asked(parent_named):
    raylet = parent_named("raylet")
    # The child starts at this process's niceness; the target is above it.
    start = os.getpriority(os.PRIO_PROCESS, 0)
    target = start + 3
    assert target <= 19, f"this test needs to run below niceness 17, not at {start}"
    assert niceness_of_every_thread(raylet) == {start}
    assert raylet_gives_way(target, parent=raylet) >= 1
    assert niceness_of_every_thread(raylet) == {target}
    # Never lowered: a second replica asking less leaves it where it is.
    assert raylet_gives_way(target - 1, parent=raylet) == 0
    assert niceness_of_every_thread(raylet) == {target}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux per-thread niceness")
def test_a_parent_that_is_not_a_raylet_or_is_gone_is_left_alone(parent_named):
    other = parent_named("pytest-driver")
    before = niceness_of_every_thread(other)
    assert raylet_gives_way(15, parent=other) == 0
    assert niceness_of_every_thread(other) == before
    assert raylet_gives_way(15, parent=2**22 + 1) == 0  # above Linux's pid_max: no such process
