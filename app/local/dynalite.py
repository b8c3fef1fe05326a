"""The local DynamoDB-compatible server: dynalite from npm, on a loopback port.

Used by `make run`, the tests and the benchmarks. It speaks the DynamoDB wire protocol, so the
service reaches it through the same boto3 code path as AWS, with only the endpoint changed.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DYNALITE_CLI = PROJECT_ROOT / "node_modules" / "dynalite" / "cli.js"
# dynalite accepts any credentials; boto3 still needs some to sign requests.
LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


log = logging.getLogger(__name__)


class DynaliteError(RuntimeError):
    pass


def local_client(endpoint_url: str, timeout_s: float = 2.0) -> Any:
    """A DynamoDB client for local tooling (seeding, readiness checks): dummy credentials."""
    config = Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 3})
    return boto3.session.Session().client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        config=config,
        **LOCAL_CREDENTIALS,
    )


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


class Dynalite:
    """A dynalite child process; use as a context manager so it is always stopped."""

    def __init__(
        self,
        port: int,
        data_dir: Path | None,
        *,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.data_dir = data_dir  # None keeps the data in memory
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self.restarts = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def client(self, timeout_s: float = 2.0) -> Any:
        return local_client(self.endpoint_url, timeout_s)

    def start(self, timeout_s: float = 30.0) -> Dynalite:
        node = shutil.which("node")
        if node is None:
            raise DynaliteError("node is not on PATH; install Node.js 18+ (make installs npm deps)")
        if not DYNALITE_CLI.is_file():
            raise DynaliteError(f"{DYNALITE_CLI} is missing; run `npm ci` in {PROJECT_ROOT}")
        if not port_is_free(self.host, self.port):
            raise DynaliteError(f"port {self.host}:{self.port} is already in use")
        args = [node, str(DYNALITE_CLI), "--host", self.host, "--port", str(self.port)]
        # Tables become ACTIVE at once instead of after dynalite's default simulated 500 ms.
        args += ["--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"]
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            args += ["--path", str(self.data_dir)]
        # The child gets its own copy of the log file's descriptor; ours is closed as soon as
        # it is started.
        with self.log_path.open("ab") if self.log_path else open(os.devnull, "wb") as log:
            # Its own session: a Ctrl-C aimed at the foreground job does not reach it, so the
            # owner decides when it stops (after the service that reads from it).
            self._process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        client = self.client(timeout_s=1.0)
        deadline = time.monotonic() + timeout_s
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise DynaliteError(f"dynalite exited with code {self._process.returncode}")
            try:
                client.list_tables(Limit=1)
                return
            except (BotoCoreError, ClientError) as exc:
                if time.monotonic() > deadline:
                    self._stop_process(timeout_s=5.0)
                    raise DynaliteError(f"dynalite not ready after {timeout_s}s: {exc}") from exc
                time.sleep(0.1)

    def supervise(
        self, *, poll_s: float = 0.25, on_restart: Callable[[Dynalite], None] | None = None
    ) -> None:
        """Restart dynalite whenever it exits on its own, on the same port and data folder.

        dynalite 4.0.0 dies on some client aborts (an `Error: aborted` thrown from its
        request handler, e.g. when a botocore read timeout closes a connection mid-request).
        With a data folder it comes back with its data; `on_restart` runs after each restart
        (say, to re-seed an in-memory one). stop() ends the supervision first.
        """
        if self._watcher is not None:
            return
        self._stopping.clear()

        def watch() -> None:
            while not self._stopping.wait(poll_s):
                with self._lock:
                    process = self._process
                    if self._stopping.is_set() or (process is not None and process.poll() is None):
                        continue
                    # Exited, or a failed restart left no process: (re)start it either way.
                    if process is not None:
                        log.warning(
                            "dynalite (pid %s) exited with code %s; restarting it on %s",
                            process.pid,
                            process.returncode,
                            self.endpoint_url,
                        )
                    try:
                        self._process = None
                        self.start()
                        self.restarts += 1
                    except DynaliteError as exc:
                        log.error("dynalite restart failed (will retry): %s", exc)
                        continue
                if on_restart is not None:
                    try:
                        on_restart(self)
                    except Exception:  # the watcher must outlive a failing hook
                        log.exception("dynalite on_restart hook failed")

        self._watcher = threading.Thread(target=watch, name="dynalite-supervisor", daemon=True)
        self._watcher.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=timeout_s)
        with self._lock:
            self._stop_process(timeout_s)

    def _stop_process(self, timeout_s: float) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)

    def __enter__(self) -> Dynalite:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
