"""The bench's single-machine peers of the ensemble, each a uvicorn process tree serving the
same artifacts, feature table and HTTP API: legacy (legacy_server.py) and the process pool
(pool_server.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loadtest.harness.systems import BIN, System, dynamo_env


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
    """uvicorn with one worker per core, each loading every member (legacy_server.py)."""

    name = "legacy"
    factory = "loadtest.bench.legacy_server:create_app"
    env_prefix = "OFFERS_LEGACY_"


class PoolSystem(PeerSystem):
    """One uvicorn web process handing scoring to a process pool (pool_server.py)."""

    name = "pool"
    factory = "loadtest.bench.pool_server:create_app"
    env_prefix = "OFFERS_POOL_"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env["OFFERS_POOL_WORKERS"] = str(self.workers)

    def web_workers(self) -> int:
        return 1  # the pool's worker processes are the parallelism


class PoolCompiledSystem(PoolSystem):
    """The process pool scoring the compiled members (ONNX Runtime, one call for all), as
    the ensemble does: the pool and the ensemble then differ only in their architecture."""

    name = "pool-compiled"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env["OFFERS_POOL_RUNTIME"] = "onnx"
