"""`python -m tests` (tests/__main__.py): what it does with its two pytest processes when
they end, or when Ctrl-C reaches it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.__main__ import INTERRUPTED, _stop, _wait_out

pytestmark = pytest.mark.unit


class InterruptedOnce:
    """A process whose first wait is cut by Ctrl-C, as the runner's is when the terminal
    sends SIGINT to the foreground pytest and the runner alike."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.waits = 0

    def wait(self) -> int:
        self.waits += 1
        if self.waits == 1:
            raise KeyboardInterrupt
        return self.code


def test_a_ctrl_c_waits_for_the_process_to_finish_and_reports_the_interrupt():
    process = InterruptedOnce(code=0)
    assert _wait_out(process) == INTERRUPTED  # type: ignore[arg-type]
    assert process.waits == 2  # waited again, for its teardown, instead of leaving it


def test_without_an_interrupt_the_exit_code_is_the_process_own():
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert _wait_out(child) == 3


def test_stopping_the_tests_beside_ends_them_with_ctrl_c_so_their_teardown_runs():
    # A child that, like pytest, turns SIGINT into KeyboardInterrupt and cleans up after it.
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('tore down', flush=True)\n"
        "    sys.exit(2)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    _stop(child)  # type: ignore[arg-type]
    assert child.returncode == 2
    assert child.stdout.read().strip() == "tore down"
