"""Benchmark process control: a system that fails to start leaves nothing running."""

import sys

import psutil
import pytest

from app.local.processes import free_port
from loadtest.harness.systems import System, SystemFailed

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


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
