"""A real Prometheus for tests: scrapes given targets every second and answers PromQL.

The binary is Debian's, unpacked by `make setup` into .local/prometheus (never installed as a
service). Each instance gets a generated config, a free loopback port and a throwaway storage
folder, runs in its own session, and is stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import requests
import yaml

from app.local.processes import PROJECT_ROOT, ChildProcess, Managed, ProcessFailed, free_port

# Where the Makefile's setup step unpacks Debian's prometheus package.
EXTRACTED_BIN = PROJECT_ROOT / ".local" / "prometheus" / "usr" / "bin" / "prometheus"
JOB = "ray"

Result = list[dict[str, Any]]


class PrometheusError(RuntimeError):
    pass


class PrometheusQueryError(PrometheusError):
    """The query API answered with an error (a PromQL parse error, a bad range, ...)."""


def prometheus_binary() -> Path:
    """$PROMETHEUS_BIN, else the binary `make setup` unpacked, else `prometheus` on PATH."""
    override = os.environ.get("PROMETHEUS_BIN")
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise PrometheusError(f"PROMETHEUS_BIN={override} is not an executable file")
        return path
    if EXTRACTED_BIN.is_file() and os.access(EXTRACTED_BIN, os.X_OK):
        return EXTRACTED_BIN
    found = shutil.which("prometheus")
    if found is not None:
        return Path(found)
    raise PrometheusError(
        f"no prometheus binary: run `make setup` (unpacks Debian's into {EXTRACTED_BIN.parent}),"
        " set PROMETHEUS_BIN, or put prometheus on PATH"
    )


def scrape_config(targets: Sequence[str], interval_s: float = 1.0) -> dict[str, Any]:
    """One job scraping `targets` ("host:port"); rules are evaluated as often as scrapes."""
    ms = round(interval_s * 1000)
    interval = f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": list(targets)}]}],
    }


def values(result: Result) -> list[float]:
    """The sample values of an instant vector (or the scalar), in the API's order."""
    return [float(sample["value"][1]) for sample in result]


class Prometheus(Managed):
    """A Prometheus child process; use as a context manager so it is always stopped."""

    def __init__(
        self,
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 1.0,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: Path | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.host = host
        self.port = port
        self.binary = binary
        self.log_path = log_path  # None: inside the temp folder (the error messages quote it)
        self._child: ChildProcess | None = None
        self._workdir: Path | None = None
        self._session = requests.Session()  # one connection reused by every poll

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def start(self, timeout_s: float = 30.0) -> Prometheus:
        binary = self.binary or prometheus_binary()
        if self.port is None:
            self.port = free_port(self.host)
        self._workdir = Path(tempfile.mkdtemp(prefix="prometheus-"))
        config = self._workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(self.targets, self.scrape_interval_s)))
        log_path = self.log_path or self._workdir / "prometheus.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        args = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self._workdir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
        ]
        self._child = ChildProcess(args, log_path=log_path, name="prometheus").start()
        try:
            self._child.wait_ready(self._ready, timeout_s)
        except ProcessFailed as exc:
            self.stop()  # its temp folder too
            raise PrometheusError(str(exc)) from exc
        except BaseException:
            # Includes Ctrl-C while starting: `with` would not call __exit__ here.
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        try:
            return self._session.get(f"{self.base_url}/-/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def query(self, promql: str, timeout_s: float = 5.0) -> Result:
        """An instant query at the current time; a scalar comes back as one unlabelled sample."""
        response = self._session.get(
            f"{self.base_url}/api/v1/query", params={"query": promql}, timeout=timeout_s
        )
        try:
            body = response.json()
        except ValueError as exc:
            raise PrometheusError(
                f"{promql!r}: HTTP {response.status_code}, not JSON: {response.text[:200]}"
            ) from exc
        if body.get("status") != "success":
            raise PrometheusQueryError(
                f"{promql!r}: {body.get('errorType', 'error')}: {body.get('error', body)}"
            )
        data = body["data"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: Result = data["result"]
        return result

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[Result], bool],
        timeout_s: float = 15.0,
        poll_s: float = 0.25,
    ) -> Result:
        """Poll `promql` until its result satisfies `predicate`; a query error raises at once
        (a bad query does not get better by waiting)."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(
                    f"{promql!r} not satisfied after {timeout_s}s; last: {result}"
                )
            time.sleep(poll_s)

    def targets_up(self) -> dict[str, bool]:
        """Each configured target ("host:port") and whether its last scrape succeeded; empty
        until Prometheus has synced its targets (up to 5 s after start)."""
        response = self._session.get(f"{self.base_url}/api/v1/targets", timeout=5)
        response.raise_for_status()
        active = response.json()["data"]["activeTargets"]
        return {t["labels"]["instance"]: t["health"] == "up" for t in active}

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()
        self._session.close()  # its pooled connections; a later start() opens new ones
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
