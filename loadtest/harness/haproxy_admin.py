"""HAProxy's runtime API (its admin socket), as Serve's HAProxy ingress starts it: which
replica servers a backend holds, taking one out of rotation for a measurement, and who
refused a backend's logins.

Found from the system's own process tree (the `haproxy` process's `-f <config>` and that
config's `stats socket` line), never from a path guessed under /tmp.
"""

from __future__ import annotations

import csv
import io
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from app.edge.haproxy_config import RELAY_BACKEND
from app.edge.server_state import BackendServer, parse_servers_state
from app.edge.wrapper import config_path

STATES = ("ready", "drain", "maint")


@dataclass(frozen=True)
class Refusals:
    """A backend's 5xx answers by who made them, cumulative since that HAProxy process
    started (subtract two readings of one process for an interval). From `show stat`, the
    meaning of each counter checked on a real HAProxy:

    - queue_full: denied by the edge's queue cap (`http-request deny`, the backend's `dreq`);
    - queue_timeout: waited out `timeout queue` (HAProxy counts these as the backend's
      connection errors, `econ`, which also counts a replica that could not be reached);
    - servers_5xx: 5xx answered by the backend's servers (the supervisors' own `503`s, and
      Serve's fallback proxy's if it ever served), the server rows' `hrsp_5xx`;
    - haproxy_5xx: every 5xx HAProxy made itself, queue_full and queue_timeout included
      (the backend's `hrsp_5xx` less the servers').

    Where the backend has the edge's relay in front (`<backend>:relay`,
    app.edge.haproxy_config.relay_sections), the relay's own refusals count too: its
    `dreq` in queue_full, and the 5xx it made itself (its `hrsp_5xx` less its server row's,
    which are the backend's answers, counted above) in haproxy_5xx.
    """

    queue_full: int = 0
    queue_timeout: int = 0
    servers_5xx: int = 0
    haproxy_5xx: int = 0

    def __sub__(self, earlier: Refusals) -> Refusals:
        return Refusals(
            self.queue_full - earlier.queue_full,
            self.queue_timeout - earlier.queue_timeout,
            self.servers_5xx - earlier.servers_5xx,
            self.haproxy_5xx - earlier.haproxy_5xx,
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class RefusalsReading:
    """Refusals with the HAProxy process that counted them: Serve replaces HAProxy (a new
    process, counting from zero) whenever the replicas change."""

    pid: int
    refusals: Refusals


# `show stat`'s `type` column: 1 is a backend's own row, 2 one of its servers.
BACKEND_ROW, SERVER_ROW = "1", "2"


def parse_refusals(show_stat: str, backend: str) -> Refusals:
    """`backend`'s Refusals from `show stat`'s CSV (a `# `-prefixed header row)."""
    rows = [r for r in csv.DictReader(io.StringIO(show_stat.lstrip("# "))) if r]
    mine = [r for r in rows if r.get("pxname") == backend]
    total = next((r for r in mine if r["type"] == BACKEND_ROW), None)
    if total is None:
        raise LookupError(f"`show stat` has no backend {backend!r}")

    def count(row: dict[str, str], field: str) -> int:
        return int(row.get(field) or 0)

    def own(name: str) -> tuple[dict[str, str] | None, int]:
        """`name`'s backend row and the 5xx its server rows answered."""
        rows_of = [r for r in rows if r.get("pxname") == name]
        row = next((r for r in rows_of if r["type"] == BACKEND_ROW), None)
        return row, sum(count(r, "hrsp_5xx") for r in rows_of if r["type"] == SERVER_ROW)

    servers_5xx = sum(count(r, "hrsp_5xx") for r in mine if r["type"] == SERVER_ROW)
    relay, relayed_5xx = own(RELAY_BACKEND.format(backend))
    return Refusals(
        queue_full=count(total, "dreq") + (count(relay, "dreq") if relay else 0),
        queue_timeout=count(total, "econ"),
        servers_5xx=servers_5xx,
        haproxy_5xx=count(total, "hrsp_5xx")
        - servers_5xx
        + (count(relay, "hrsp_5xx") - relayed_5xx if relay else 0),
    )


def parse_pid(show_info: str) -> int:
    """The `Pid:` line of `show info`."""
    for line in show_info.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "Pid":
            return int(value)
    raise ValueError(f"not an answer of `show info`: {show_info[:200]!r}")


def stats_socket(config_text: str) -> Path:
    """The admin socket a generated haproxy.cfg declares (`stats socket <path> …`)."""
    for line in config_text.splitlines():
        words = line.split()
        if words[:2] == ["stats", "socket"] and len(words) > 2:
            return Path(words[2])
    raise ValueError("the HAProxy config declares no `stats socket`")


class HAProxyAdmin:
    """Commands on one HAProxy's admin socket."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    @classmethod
    def of(cls, processes: Iterable[psutil.Process]) -> HAProxyAdmin:
        """The admin socket of the `haproxy` process among `processes` (a system's tree)."""
        for process in processes:
            try:
                if process.name() != "haproxy":
                    continue
                found = config_path(process.cmdline())
            except psutil.Error:
                continue
            if found is not None and found.is_file():
                return cls(stats_socket(found.read_text()))
        raise LookupError("no haproxy process with a readable -f config in the process tree")

    @classmethod
    def listening_on(cls, port: int) -> HAProxyAdmin:
        """The admin socket of the HAProxy that listens on `port` on this host (a running
        `make run`'s ingress, whose process tree is not ours)."""
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid is not None:
                    return cls.of([psutil.Process(conn.pid)])
        raise LookupError(f"no process listens on port {port}")

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(str(self.socket_path))
            conn.sendall(line.encode() + b"\n")
            chunks: list[bytes] = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers(self, backend: str) -> list[BackendServer]:
        return parse_servers_state(self.command(f"show servers state {backend}"), backend)

    def refusals(self, backend: str) -> RefusalsReading:
        """`backend`'s Refusals and the pid of the process that counted them, read in one
        exchange (HAProxy answers `;`-separated commands in order on one connection)."""
        answer = self.command("show info;show stat")
        info, found, stat = answer.partition("# pxname")
        if not found:
            raise ValueError(f"no `show stat` in HAProxy's answer: {answer[:200]!r}")
        return RefusalsReading(parse_pid(info), parse_refusals(found + stat, backend))

    def backends(self) -> list[str]:
        """Every backend's name."""
        rows = csv.DictReader(io.StringIO(self.command("show stat").lstrip("# ")))
        return sorted({r["pxname"] for r in rows if r and r["type"] == BACKEND_ROW})

    def set_state(self, backend: str, server: str, state: str) -> None:
        if state not in STATES:
            raise ValueError(f"state must be one of {STATES}, not {state!r}")
        answer = self.command(f"set server {backend}/{server} state {state}")
        if answer.strip():  # HAProxy answers an accepted `set server` with an empty line
            raise RuntimeError(f"HAProxy refused `set server {backend}/{server}`: {answer!r}")
