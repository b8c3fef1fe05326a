"""A local one-node Ray cluster for `make run`, with fixed, documented ports.

`serve run` on its own starts a private Ray whose metrics port is random. Started here
instead (`ray start --head --block`, in a session of its own), the cluster has fixed ports:
Prometheus metrics on http://127.0.0.1:<metrics_port>/metrics, and the dashboard (and its
REST API, which `serve deploy` and `serve status` use) on http://127.0.0.1:<dashboard_port>.
Its own temp dir keeps its address away from /tmp/ray, so no other `ray.init()` on the host
finds it. Stopping it stops every Ray process it started, and no other Ray on the host.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from app.local.processes import ChildProcess, Managed, ProcessFailed, free_port, port_is_free
from app.local.ray_auth import ray_auth_env


class RayHeadFailed(RuntimeError):
    pass


class RayHead(Managed):
    def __init__(
        self,
        bin_dir: Path,
        env: dict[str, str],
        log_path: Path,
        *,
        metrics_port: int,
        dashboard_port: int,
        num_cpus: int | None = None,
    ) -> None:
        self._bin = bin_dir
        # Token auth with the project's own token (app.local.ray_auth): `ray start` never
        # makes one, and `serve deploy`/`serve status` send it only when told to.
        self.env = {**env, **ray_auth_env()}
        self.log_path = log_path
        self.metrics_port = metrics_port
        self.dashboard_port = dashboard_port
        self.gcs_port = free_port()
        self._num_cpus = num_cpus
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-offers-", dir="/tmp"))
        self._child: ChildProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, timeout_s: float = 120.0) -> RayHead:
        ports = (self.metrics_port, self.dashboard_port)
        busy = [p for p in ports if not port_is_free("127.0.0.1", p)]
        if busy:
            self.stop()  # nothing started; its temp dir goes
            raise RayHeadFailed(
                f"ports {busy} are in use (another `make run` or Ray?); pass other ports"
            )
        try:
            self._start(timeout_s)
        except BaseException:
            # Includes Ctrl-C while waiting: `with` would not call __exit__ here, and the
            # cluster runs in its own session, out of reach of the terminal's Ctrl-C.
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        args = [
            str(self._bin / "ray"),
            "start",
            "--head",
            "--block",
            f"--temp-dir={self.temp_dir}",
            f"--port={self.gcs_port}",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--metrics-export-port={self.metrics_port}",
            "--disable-usage-stats",
        ]
        if self._num_cpus is not None:
            args.append(f"--num-cpus={self._num_cpus}")
        # SIGINT: `ray start --block` stops every process of its cluster, then exits.
        self._child = ChildProcess(
            args,
            log_path=self.log_path,
            name="ray start",
            env=self.env,
            cwd=None,
            stop_steps=((signal.SIGINT, 60.0),),
        ).start()
        try:
            self._child.wait_ready(
                lambda: self._answers(f"{self.dashboard_url}/api/version")
                and self._answers(self.metrics_url),
                timeout_s,
                poll_s=1.0,
            )
        except ProcessFailed as exc:
            raise RayHeadFailed(f"{exc}\n(log: {self.log_path})") from exc

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status < 500)
        except urllib.error.HTTPError as exc:  # e.g. 401: the dashboard's token auth
            return exc.code < 500
        except OSError:
            return False

    def stop(self) -> None:
        """SIGINT to `ray start --block` (it stops what it started), then its whole process
        group if anything is left; its temp dir goes."""
        child, self._child = self._child, None
        if child is not None:
            child.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
