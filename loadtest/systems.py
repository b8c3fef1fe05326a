"""Start, watch and stop the two systems a benchmark compares, each as its own process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import requests
import yaml

from app.local.dynalite import LOCAL_CREDENTIALS, PROJECT_ROOT
from app.local.processes import default_sigint
from app.local.ray_auth import ray_auth_env
from loadtest import variants
from loadtest.variants import Variant

BIN = Path(sys.executable).parent


class SystemFailed(RuntimeError):
    pass


class ManagedProcess:
    """A child in its own session, stopped with SIGINT, then SIGTERM, then SIGKILL."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        before_exec: Callable[[], None] | None = None,
    ) -> None:
        self.args = args
        self.env = env
        self.log_path = log_path
        # Runs in the child before exec (e.g. joining the system-under-test cgroup).
        self.before_exec = before_exec
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args,
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=self._preexec,
            )

    def _preexec(self) -> None:
        # Started from a background job, we (and so the child) may ignore SIGINT; stop()
        # relies on it reaching `serve run`, which then shuts Ray down.
        default_sigint()
        if self.before_exec is not None:
            self.before_exec()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tree(self) -> list[psutil.Process]:
        """The process and every descendant (for Ray: GCS, raylet and all replicas)."""
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace_s: float = 60.0) -> None:
        if self.process is None:
            return
        family = self.tree()
        for sig, wait_s in (
            (signal.SIGINT, grace_s),
            (signal.SIGTERM, 10.0),
            (signal.SIGKILL, 5.0),
        ):
            if self.process.poll() is not None:
                break
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
        # Anything the child left behind (e.g. Ray workers orphaned by a hard kill) is ours,
        # identified by pid from the tree recorded before stopping: never a pattern kill.
        _, alive = psutil.wait_procs([p for p in family if p.is_running()], timeout=10)
        for leftover in alive:
            try:
                leftover.kill()
            except psutil.NoSuchProcess:
                pass


def run_interruptible(run: Callable[[], object], log: Callable[[str], None]) -> int:
    """Run a benchmark-style job; SIGTERM (a CI runner, `kill`) unwinds like Ctrl-C, so
    every `with` block stops the process it started. Exit code 130 when interrupted."""

    def interrupt(signum: int, _frame) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        run()
    except KeyboardInterrupt:
        log("interrupted; everything started has been stopped")
        return 130
    return 0


def dynamo_env(endpoint_url: str, table: str) -> dict[str, str]:
    return {
        "OFFERS_DYNAMODB_ENDPOINT_URL": endpoint_url,
        "OFFERS_DYNAMODB_TABLE": table,
        "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIALS["aws_secret_access_key"],
    }


class System:
    """One system under test: a process tree serving `<base_url><route_prefix>/v1/offers`."""

    name: str

    def __init__(self, port: int, route_prefix: str, log_path: Path) -> None:
        self.port = port
        self.route_prefix = route_prefix
        self.log_path = log_path
        self.process: ManagedProcess | None = None
        # Runs in the system's first process before exec (loadtest.isolation).
        self.before_exec: Callable[[], None] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self, ready_timeout_s: float = 600.0) -> System:
        args, env = self._command()
        self.process = ManagedProcess(args, env, self.log_path, before_exec=self.before_exec)
        self.process.start()
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            # Includes Ctrl-C/SIGTERM while starting: `with` would not call __exit__ here.
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        url = f"{self.base_url}{self.route_prefix}/healthz"
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.process.alive():
                raise SystemFailed(f"{self.name} exited while starting; see {self.log_path}")
            try:
                if requests.get(url, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise SystemFailed(f"{self.name} not ready after {timeout_s}s; see {self.log_path}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def __enter__(self) -> System:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class PeerSystem(System):
    """A single-machine peer of the ensemble, served by uvicorn from the same artifacts,
    feature table and HTTP API."""

    factory: str  # uvicorn app factory
    env_prefix: str  # the server's settings prefix

    def __init__(
        self,
        version_dir: Path,
        route_prefix: str,
        port: int,
        endpoint_url: str,
        table: str,
        log_path: Path,
        workers: int | None = None,
    ) -> None:
        super().__init__(port, route_prefix, log_path)
        self.version_dir = version_dir
        # Worker processes: one per core unless told otherwise.
        self.workers = workers or os.cpu_count() or 1
        self.env = {
            **os.environ,
            **dynamo_env(endpoint_url, table),
            f"{self.env_prefix}VERSION_DIR": str(version_dir),
        }

    def web_workers(self) -> int:
        return self.workers

    def _command(self) -> tuple[list[str], dict[str, str]]:
        args = [
            str(BIN / "uvicorn"),
            self.factory,
            "--factory",
            f"--workers={self.web_workers()}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            "--no-access-log",
            "--log-level=warning",
        ]
        return args, self.env


class LegacySystem(PeerSystem):
    """uvicorn with one worker per core, each loading every member (loadtest.legacy_server)."""

    name = "legacy"
    factory = "loadtest.legacy_server:create_app"
    env_prefix = "OFFERS_LEGACY_"


class PoolSystem(PeerSystem):
    """One uvicorn web process handing scoring to a process pool (loadtest.pool_server)."""

    name = "pool"
    factory = "loadtest.pool_server:create_app"
    env_prefix = "OFFERS_POOL_"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env["OFFERS_POOL_WORKERS"] = str(self.workers)

    def web_workers(self) -> int:
        return 1  # the pool's worker processes are the parallelism


class EnsembleSystem(System):
    """`serve run` of a Serve config derived from serve_config.yaml (local Ray started by it)."""

    name = "ensemble"

    def __init__(
        self,
        config_path: Path,
        route_prefix: str,
        port: int,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port, route_prefix, log_path)
        self.config_path = config_path
        self.extra_env = extra_env or {}

    def _command(self) -> tuple[list[str], dict[str, str]]:
        # `serve run` starts a local Ray: with the project's token, not one under ~/.ray.
        return [str(BIN / "serve"), "run", str(self.config_path)], {
            **os.environ,
            **ray_auth_env(),
            **self.extra_env,
        }


def derived_serve_config(
    base: Path,
    *,
    profile: str,
    port: int,
    endpoint_url: str,
    table: str,
    out: Path,
    variant: Variant | None = None,
) -> tuple[Path, str, dict[str, str]]:
    """Write a copy of `base` serving its first application with `profile` on `port`,
    optionally rewritten to an ablation variant.

    Returns the new config's path, the application's route prefix and the environment
    `serve run` must start Ray with.
    """
    document = yaml.safe_load(base.read_text())
    document["http_options"] = {**document.get("http_options", {}), "port": port}
    app = document["applications"][0]
    document["applications"] = [app]
    app["args"] = {**app.get("args", {}), "profile": profile}
    env = app.setdefault("runtime_env", {}).setdefault("env_vars", {})
    env.update(dynamo_env(endpoint_url, table))
    if variant is not None:
        variants.apply(variant, app)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return out, app["route_prefix"], variants.ray_env(variant)
