"""The host faults of the reliability run: how many neighbours make a host N x slower, which
replicas HAProxy has up, and a DynamoDB pause that resumes."""

import subprocess
import sys
import time

import psutil
import pytest

from loadtest.harness.haproxy_admin import HAProxyAdmin
from loadtest.reliability.host_faults import (
    cpu_neighbours,
    neighbours_for,
    pause_for,
    running_replicas,
)
from tests.unit.loadtest.harness.test_haproxy_admin import STATE

pytestmark = pytest.mark.unit

BACKEND = "http-galaxy-raiders-2026-11"


def test_a_host_n_times_slower_has_n_minus_1_busy_processes_per_core():
    assert neighbours_for(1, cores=2) == 0
    assert neighbours_for(2, cores=2) == 2
    assert neighbours_for(3, cores=2) == 4
    assert neighbours_for(3, cores=8) == 16


def test_only_replicas_that_are_up_count_and_never_serves_fallback_proxy():
    down = STATE.replace("supervisor-xe0gxrww 127.0.0.1 2 ", "supervisor-xe0gxrww 127.0.0.1 0 ")

    class Admin(HAProxyAdmin):  # the real parsing, HAProxy's answer given
        def __init__(self, text):
            self.text = text

        def command(self, line):
            assert line == f"show servers state {BACKEND}"
            return self.text

    assert running_replicas(Admin(STATE), BACKEND) == {
        "SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-3aiuggip",
        "SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-xe0gxrww",
    }
    assert running_replicas(Admin(down), BACKEND) == {
        "SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-3aiuggip"
    }


def test_neighbours_burn_cpu_at_the_replicas_niceness_and_are_gone_after_it():
    with cpu_neighbours(1, niceness=19) as pids:
        proc = psutil.Process(pids[0])
        deadline = time.monotonic() + 10
        while proc.nice() != 19:  # set by the process itself, first thing
            assert time.monotonic() < deadline
            time.sleep(0.05)
        before = proc.cpu_times().user
        time.sleep(1.0)
        assert proc.cpu_times().user > before  # busy
    assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == "zombie"


def test_a_paused_process_answers_nothing_then_resumes():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = psutil.Process(child.pid)

    def wait_for(stopped: bool) -> None:
        # SIGSTOP and SIGCONT are delivered asynchronously: poll for the state, in order.
        deadline = time.monotonic() + 10
        while (proc.status() == psutil.STATUS_STOPPED) != stopped:
            assert time.monotonic() < deadline, f"never {'stopped' if stopped else 'resumed'}"
            time.sleep(0.01)

    try:
        pause_for(child.pid, 2.0)
        wait_for(stopped=True)
        wait_for(stopped=False)
    finally:
        child.kill()
        child.wait(timeout=10)
