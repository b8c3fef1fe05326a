"""Benchmark process control: a system that fails to start leaves nothing running."""

import sys
import time

import psutil
import pytest

from app.local.processes import free_port
from loadtest.systems import System, SystemFailed

pytestmark = pytest.mark.unit


class NeverReady(System):
    """Listens nowhere: its health check can only time out."""

    name = "never-ready"

    def _command(self):
        return [sys.executable, "-c", "import time; time.sleep(120)"], {}


def test_start_timeout_stops_the_process(tmp_path):
    system = NeverReady(free_port(), "/x", tmp_path / "never.log")
    with pytest.raises(SystemFailed, match="not ready"):
        system.start(ready_timeout_s=1.0)
    assert system.process is None


def test_interrupt_while_starting_stops_the_process(tmp_path, monkeypatch):
    system = NeverReady(free_port(), "/x", tmp_path / "never.log")
    started = []

    def interrupted(self, timeout_s):
        started.append(self.process.pid)
        raise KeyboardInterrupt

    monkeypatch.setattr(NeverReady, "_wait_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        system.start()
    assert system.process is None
    assert not psutil.pid_exists(started[0]) or psutil.Process(started[0]).status() == "zombie"


def test_sigterm_unwinds_a_job_like_ctrl_c():
    import os
    import signal

    from loadtest.systems import run_interruptible

    cleaned = []
    logged = []

    def job():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted before this ends
        finally:
            cleaned.append(True)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert run_interruptible(job, logged.append) == 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert cleaned == [True]
    assert logged and "interrupted" in logged[0]
    assert run_interruptible(lambda: None, logged.append) == 0
    signal.signal(signal.SIGTERM, previous)
