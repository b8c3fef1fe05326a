"""The one process harness: readiness with a deadline, the log tail on failure, stop by group."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from app.local.processes import ChildProcess, ProcessFailed

pytestmark = pytest.mark.unit


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still has a pid: it is gone for our purpose once it is not running.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1].startswith("Z")


def test_an_early_exit_fails_with_its_code_and_log_tail(tmp_path: Path):
    child = ChildProcess(
        python("print('bad flag --frobnicate', flush=True); raise SystemExit(3)"),
        log_path=tmp_path / "child.log",
        name="frob",
    ).start()
    with pytest.raises(ProcessFailed, match=r"frob exited with code 3: bad flag --frobnicate"):
        child.wait_ready(lambda: False, timeout_s=30)
    assert child.process is None  # stopped and forgotten


def test_not_ready_by_the_deadline_is_stopped_with_the_log_tail(tmp_path: Path):
    child = ChildProcess(
        python("import time; print('still loading', flush=True); time.sleep(60)"),
        log_path=tmp_path / "child.log",
    ).start()
    pid = child.pid
    assert pid is not None
    started = time.monotonic()
    with pytest.raises(ProcessFailed, match=r"not ready after 1s: still loading"):
        child.wait_ready(lambda: False, timeout_s=1.0)
    assert time.monotonic() - started < 20
    assert gone(pid)


def test_ready_returns_once_the_probe_holds(tmp_path: Path):
    marker = tmp_path / "ready"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)"
    with ChildProcess(python(code), log_path=tmp_path / "child.log") as child:
        child.wait_ready(marker.exists, timeout_s=30)
        assert child.alive()
    assert not child.alive()


def test_its_own_stop_signal_comes_first(tmp_path: Path):
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(7))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "child.log"
    child = ChildProcess(python(code), log_path=log, stop_steps=((signal.SIGINT, 20.0),)).start()
    child.wait_ready(lambda: "up" in log.read_text(), timeout_s=30)
    process = child.process
    assert process is not None
    child.stop()
    assert process.returncode == 7  # exited through its SIGINT handler, not killed


def test_stop_kills_the_whole_group_even_what_ignores_its_signals(tmp_path: Path):
    # A child that ignores SIGTERM and leaves a grandchild that ignores it too.
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(grandchild.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "child.log"
    child = ChildProcess(
        python(code), log_path=log, stop_steps=((signal.SIGTERM, 0.5),)
    ).start()
    child.wait_ready(lambda: log.read_text().strip().isdigit(), timeout_s=30)
    grandchild = int(log.read_text())
    pid = child.pid
    assert pid is not None
    child.stop()
    deadline = time.monotonic() + 10
    while not (gone(pid) and gone(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid) and gone(grandchild)
    child.stop()  # idempotent


def test_with_stops_it_when_the_block_raises(tmp_path: Path):
    with pytest.raises(RuntimeError, match="boom"):
        with ChildProcess(python("import time; time.sleep(60)"), log_path=None) as child:
            pid = child.pid
            raise RuntimeError("boom")
    assert pid is not None and gone(pid)
