"""The local DynamoDB-compatible server: dynalite from npm, on a loopback port.

Used by `make run`, the tests and the benchmarks. It speaks the DynamoDB wire protocol, so the
service reaches it through the same boto3 code path as AWS, with only the endpoint changed.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botocore.config import Config

from app.adapters.aws_session import new_session
from app.local.aws_server import LocalAwsServer
from app.local.processes import LOCAL_CREDENTIALS, PROJECT_ROOT

DYNALITE_CLI = PROJECT_ROOT / "node_modules" / "dynalite" / "cli.js"


log = logging.getLogger(__name__)


class DynaliteError(RuntimeError):
    pass


def local_client(endpoint_url: str, timeout_s: float = 2.0) -> Any:
    """A DynamoDB client for local tooling (seeding, readiness checks): dummy credentials."""
    config = Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 3})
    return new_session().client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        config=config,
        **LOCAL_CREDENTIALS,
    )


class Dynalite(LocalAwsServer):
    """A dynalite child process; use as a context manager so it is always stopped."""

    name = "dynalite"
    error = DynaliteError

    def __init__(
        self,
        port: int,
        data_dir: Path | None,
        *,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
    ) -> None:
        super().__init__(port, host=host, log_path=log_path)
        self.data_dir = data_dir  # None keeps the data in memory
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self.restarts = 0

    def client(self, timeout_s: float = 2.0) -> Any:
        return local_client(self.endpoint_url, timeout_s)

    def probe(self, client: Any) -> None:
        client.list_tables(Limit=1)

    def start(self, timeout_s: float = 30.0) -> Dynalite:
        node = shutil.which("node")
        if node is None:
            raise DynaliteError("node is not on PATH; install Node.js 18+ (make installs npm deps)")
        if not DYNALITE_CLI.is_file():
            raise DynaliteError(f"{DYNALITE_CLI} is missing; run `npm ci` in {PROJECT_ROOT}")
        self.check_port()
        args = [node, str(DYNALITE_CLI), "--host", self.host, "--port", str(self.port)]
        # Tables become ACTIVE at once instead of after dynalite's default simulated 500 ms.
        args += ["--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"]
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            args += ["--path", str(self.data_dir)]
        self.launch(args, timeout_s)
        return self

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
                    child = self._child
                    if self._stopping.is_set() or (child is not None and child.alive()):
                        continue
                    # Exited, or a failed restart left no process: (re)start it either way.
                    if child is not None:
                        log.warning(
                            "dynalite (pid %s) exited with code %s; restarting it on %s",
                            child.pid,
                            child.returncode,
                            self.endpoint_url,
                        )
                        child.stop()  # its group, if anything of it is left
                    try:
                        self._child = None
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
        child, self._child = self._child, None
        if child is not None:
            child.stop_steps = ((child.stop_steps[0][0], timeout_s),)
            child.stop()
