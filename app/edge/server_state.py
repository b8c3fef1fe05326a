"""HAProxy's view of a backend's servers: the answer of `show servers state`, which is also
the format of the `server-state-file` Serve saves before every reload.

The edge rewrite reads the saved file to tell a backend whose replicas all died from one
whose replicas are only being reconfigured (app.edge.haproxy_config); the load-test harness
reads the live answer (loadtest.harness.haproxy_admin).
"""

from __future__ import annotations

from dataclasses import dataclass

# A Serve replica's server line, as Serve 2.60's template names it (the Python proxy's
# `backup` fallback server is named SERVE_PROXY_ACTOR-…).
REPLICA_PREFIX = "SERVE_REPLICA_"

# `srv_op_state` (HAProxy's enum srv_state): 0 stopped (down), 1 starting, 2 running,
# 3 stopping (up, soft-stopping).
STOPPED = 0
RUNNING = 2


@dataclass(frozen=True)
class BackendServer:
    name: str
    address: str
    port: int
    op_state: int = RUNNING

    @property
    def running(self) -> bool:
        """Up and taking logins."""
        return self.op_state == RUNNING

    @property
    def down(self) -> bool:
        """HAProxy took it out (failed checks, or errors seen on live traffic)."""
        return self.op_state == STOPPED

    @property
    def is_replica(self) -> bool:
        return self.name.startswith(REPLICA_PREFIX)


def parse_all(text: str) -> dict[str, list[BackendServer]]:
    """Every backend's servers, by backend name.

    The text is a version line, a `#` header naming the columns, then one row per server;
    the columns are read by the header's names, not by position."""
    header: list[str] | None = None
    backends: dict[str, list[BackendServer]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            header = line.lstrip("# ").split()
            continue
        if header is None or not line.strip():
            continue
        row = dict(zip(header, line.split(), strict=False))
        backends.setdefault(row["be_name"], []).append(
            BackendServer(
                row["srv_name"],
                row["srv_addr"],
                int(row["srv_port"]),
                int(row.get("srv_op_state", str(RUNNING))),
            )
        )
    if header is None:
        raise ValueError(f"not an answer of `show servers state`: {text[:200]!r}")
    return backends


def parse_servers_state(text: str, backend: str) -> list[BackendServer]:
    """Servers of `backend` from `show servers state <backend>`'s answer."""
    return parse_all(text).get(backend, [])
