"""The faults the reliability scenarios inject: a slow DynamoDB (a delay proxy in front of
dynalite), a client that dies mid-request, and the replicas a kill targets (and the Ray
sessions whose logs tell how they came back)."""

from __future__ import annotations

import re
import signal
import socket
import time
from pathlib import Path

import psutil

from app.local.processes import PROJECT_ROOT
from loadtest.harness.cluster import LocalCluster
from loadtest.harness.systems import BIN, ManagedProcess
from loadtest.reliability.startup_trace import session_dirs


class DelayProxyProcess(ManagedProcess):
    """loadtest/reliability/delay_proxy.py between the service and dynalite: SIGUSR1 adds
    `delay_ms` to every DynamoDB call, SIGUSR2 takes it off, SIGHUP logs the calls so far."""

    def __init__(self, listen_port: int, target: str, log_path: Path, delay_ms: float) -> None:
        super().__init__(
            [
                str(BIN / "python"),
                "-m",
                "loadtest.reliability.delay_proxy",
                "--listen",
                f"127.0.0.1:{listen_port}",
                "--target",
                target,
                "--delay-ms",
                str(delay_ms),
            ],
            {"PATH": str(BIN), "PYTHONPATH": str(PROJECT_ROOT)},
            log_path,
        )
        self.port = listen_port

    def calls(self) -> int:
        self.process.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        time.sleep(0.3)
        counts = re.findall(r"calls (\d+)", self.log_path.read_text())
        return int(counts[-1]) if counts else 0

    def wait_listening(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"delay proxy not listening on {self.port}")


def abort_mid_request(host: str, port: int) -> None:
    """What a client that dies mid-request does to dynalite: half a body, then a reset."""
    sock = socket.create_connection((host, port))
    sock.sendall(
        b"POST / HTTP/1.1\r\nHost: dynalite\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b'X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{"Lim'
    )
    time.sleep(0.2)
    sock.close()


def replica_pids(app: str, deployment: str, cluster: LocalCluster | None) -> list[int]:
    """Pids of an application's replicas of a deployment (a name prefix: `member-` matches
    every member deployment), in the cluster's process trees, or on this host (a running
    `make run`) when there is no cluster."""
    return [
        pid
        for pid, args in _command_lines(cluster)
        if f"ServeReplica:{app}:{deployment}" in " ".join(args)
    ]


def ray_sessions(cluster: LocalCluster | None) -> list[Path]:
    """The session folders (logs included) of the cluster's Ray nodes or, with no cluster,
    of every Ray node on this host (a running `make run`, and any other)."""
    return session_dirs(args for _, args in _command_lines(cluster))


def _command_lines(cluster: LocalCluster | None) -> list[tuple[int, list[str]]]:
    if cluster is not None:
        procs = [p for node in (cluster.head, cluster.worker) if node for p in node.tree()]
    else:
        procs = list(psutil.process_iter())
    found = []
    for proc in procs:
        try:
            found.append((proc.pid, proc.cmdline()))
        except psutil.Error:
            continue
    return found
