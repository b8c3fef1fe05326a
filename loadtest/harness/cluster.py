"""A Ray cluster of a head and one worker node on this machine, with the service deployed.

Each node is a `ray start --block` in its own session (ManagedProcess), so losing the worker
is a real node loss: SIGKILL to its raylet and every process under it, no clean stop. The
nodes get their own ports; the cluster gets its own temp dir (short: Ray's unix sockets
live under it), so it never meets another Ray on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from app.config.ray_env import ray_node_env
from app.local.processes import Managed, ProcessFailed, free_port
from app.local.ray_auth import ray_auth_env
from loadtest.harness import serve_status
from loadtest.harness.http_ready import answers
from loadtest.harness.systems import BIN, ManagedProcess, SystemFailed

WORKER_RESOURCE = "reliability_worker"


def cli_env() -> dict[str, str]:
    """Where the nodes start and what the CLI calls send: Serve's process settings, and the
    project's token (`ray start` makes none; the serve CLI sends it only when told to)."""
    return {**os.environ, **ray_node_env(), **ray_auth_env()}


class LocalCluster(Managed):
    def __init__(
        self,
        folder: Path,
        *,
        head_cpus: int = 2,
        worker_cpus: int = 1,
        node_env: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        # Laid over cli_env() where the nodes start (e.g. the edge's, serve_config.edge_env).
        self.node_env = node_env or {}
        self.head_cpus = head_cpus
        self.worker_cpus = worker_cpus
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-rel-", dir="/tmp"))
        self.head: ManagedProcess | None = None
        self.worker: ManagedProcess | None = None

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _node_ports(self) -> list[str]:
        # Every port a node opens, chosen free, so two nodes on one host do not collide.
        return [
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
        ]

    def start(self) -> LocalCluster:
        self.head = ManagedProcess(
            [
                str(BIN / "ray"),
                "start",
                "--head",
                "--block",
                f"--temp-dir={self.temp_dir}",
                f"--num-cpus={self.head_cpus}",
                f"--port={self.gcs_port}",
                "--node-ip-address=127.0.0.1",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                "--disable-usage-stats",
                *self._node_ports(),
            ],
            {**cli_env(), **self.node_env},
            self.folder / "ray-head.log",
        )
        self.head.start()
        self._wait_dashboard()
        self.start_worker()
        return self

    def start_worker(self) -> None:
        self.worker = ManagedProcess(
            [
                str(BIN / "ray"),
                "start",
                "--block",
                f"--address=127.0.0.1:{self.gcs_port}",
                f"--num-cpus={self.worker_cpus}",
                f'--resources={{"{WORKER_RESOURCE}": 1}}',
                "--node-ip-address=127.0.0.1",
                "--disable-usage-stats",
                *self._node_ports(),
            ],
            {**cli_env(), **self.node_env},
            self.folder / "ray-worker.log",
        )
        self.worker.start()
        self._wait_nodes(2)

    def _wait_dashboard(self, timeout_s: float = 120) -> None:
        assert self.head is not None

        def up() -> bool:
            return answers(f"{self.dashboard}/api/version", accept=lambda status: status < 500)

        try:
            self.head.wait_ready(up, timeout_s, poll_s=1.0)
        except ProcessFailed as exc:
            raise SystemFailed(f"the head node: {exc}") from exc

    def alive_nodes(self) -> int:
        result = self.cli("ray", "list", "nodes", "--format", "json", timeout=60)
        try:
            nodes = json.loads(result.stdout or "[]")
        except ValueError:
            return 0
        return sum(1 for n in nodes if n.get("state") == "ALIVE")

    def _wait_nodes(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_nodes() < count:
            if time.monotonic() > deadline:
                raise SystemFailed(f"{count} Ray nodes not alive after {timeout_s}s")
            time.sleep(1)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / args[0]), *args[1:], "--address", self.dashboard],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=cli_env(),
        )

    def deploy(self, config: Path, apps: list[str], timeout_s: float = 600) -> None:
        result = self.cli("serve", "deploy", str(config))
        if result.returncode != 0:
            raise SystemFailed(f"serve deploy failed:\n{result.stderr[-3000:]}")
        try:
            serve_status.wait_running(self.dashboard, apps, timeout_s)
        except (serve_status.DeployFailed, TimeoutError) as exc:
            raise SystemFailed(f"deploy did not reach RUNNING: {exc}") from exc

    def worker_replicas(self) -> list[str]:
        """Names of the Serve replica processes running on the worker node."""
        if self.worker is None:
            return []
        names = []
        for proc in self.worker.tree():
            try:
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if "ServeReplica:" in title:
                names.append(title.split("ServeReplica:", 1)[1].split()[0])
        return names

    def kill_worker(self) -> list[int]:
        """SIGKILL the worker node: its `ray start`, raylet and every process below them."""
        assert self.worker is not None
        family = self.worker.tree()
        for proc in family:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        return [p.pid for p in family]

    def stop(self) -> None:
        self.cli("serve", "shutdown", "--yes", timeout=120)
        for node in (self.worker, self.head):
            if node is not None:
                node.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        # A node that failed to start leaves the other running: stop both.
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise
