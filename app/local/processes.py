"""The child processes of the local tooling, the tests and the studies: one harness for all.

dynalite, the local Ray head, Prometheus, the reliability cluster's nodes and the
benchmark's systems are each a `ChildProcess`:
- in a session (and so a process group) of its own, so a Ctrl-C aimed at the foreground job
  does not reach it, and its owner decides when it stops;
- its output appended to a log file, whose tail a failure quotes;
- ready when its owner's probe says so, within a deadline;
- stopped by its own signals first (`ray start --block` shuts its cluster down on SIGINT),
  then SIGKILL to its whole group, never by a pattern.

Also here: the checkout's root, free loopback ports and the local DynamoDB credentials.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from app.config.project import PROJECT_ROOT as PROJECT_ROOT  # re-exported: the tools name it here

# dynalite accepts any credentials; boto3 still needs some to sign requests.
LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}

# (signal, seconds to wait for the process to exit after it)
StopStep = tuple[signal.Signals, float]
TERMINATE: tuple[StopStep, ...] = ((signal.SIGTERM, 10.0),)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def default_sigint() -> None:
    """preexec_fn: a child gets the default SIGINT action even if we ignore SIGINT.

    A shell that starts a job in the background leaves SIGINT ignored, and children inherit
    that; `serve run` and `ray start --block` must always shut their Ray down on SIGINT.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def log_tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.is_file():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class ProcessFailed(RuntimeError):
    """A child exited before it was ready, or was not ready in time (its log tail quoted)."""


class Managed:
    """`with` for whatever the tooling starts and must always stop (a process, a cluster,
    a server and its files): __enter__ is start(), __exit__ is stop(), whatever happened."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ChildProcess(Managed):
    """One child process in its own session; `with` starts it and always stops its group."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        log_path: Path | None,
        name: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = PROJECT_ROOT,
        stop_steps: Sequence[StopStep] = TERMINATE,
        before_exec: Callable[[], None] | None = None,
    ) -> None:
        self.args = [str(a) for a in args]
        self.log_path = log_path
        self.name = name or Path(self.args[0]).name
        self.env = env
        self.cwd = cwd
        self.stop_steps = tuple(stop_steps)
        # Runs in the child before exec (e.g. joining the system-under-test cgroup).
        self.before_exec = before_exec
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Self:
        """Start it (not waiting for readiness: see wait_ready)."""
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The child keeps its own copy of the log's descriptor; ours closes at once.
        with self.log_path.open("ab") if self.log_path else open(os.devnull, "wb") as log:
            self.process = subprocess.Popen(
                self.args,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=self._preexec,
            )
        return self

    def _preexec(self) -> None:
        default_sigint()
        if self.before_exec is not None:
            self.before_exec()

    def wait_ready(
        self, ready: Callable[[], bool], timeout_s: float, *, poll_s: float = 0.1
    ) -> None:
        """Poll `ready` until it holds. If the child exits first, or the deadline passes, it is
        stopped and ProcessFailed quotes its log's tail; so is a Ctrl-C while waiting, since
        `with` does not call __exit__ for a failed __enter__."""
        deadline = time.monotonic() + timeout_s
        try:
            while not ready():
                if not self.alive():
                    raise ProcessFailed(
                        f"{self.name} exited with code {self.returncode}: "
                        f"{log_tail(self.log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise ProcessFailed(
                        f"{self.name} not ready after {timeout_s:.0f}s: {log_tail(self.log_path)}"
                    )
                time.sleep(poll_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Its own stop signals in turn, each with its wait; then SIGKILL to its whole group
        (what it started and left behind, in its session). Idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        for sig, wait_s in self.stop_steps:
            if process.poll() is not None:
                break
            process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=wait_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
