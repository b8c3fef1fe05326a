"""HAProxy as the installed Serve configures it, outside a cluster: the config its HAProxyApi
renders for one application, and that config as the edge (app.edge) rewrites it, on disk.

The edge's tests and studies run a real HAProxy on these files with stand-in replicas, so
what they measure is the config a cluster would run, not a hand-written imitation of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.config.ray_env import SERVE_PROCESS_ENV
from app.local.processes import free_port


def rendered_by_serve(
    folder: Path,
    app: str,
    route_prefix: str,
    replica_ports: list[int],
    *,
    http_port: int,
    fallback: bool = True,
) -> str:
    """haproxy.cfg as Serve's HAProxyApi writes it, in `folder`: application `app` at
    `route_prefix`, an ingress replica on each of `replica_ports`, HAProxy's threads and
    retry policy as shipped (SERVE_PROCESS_ENV), and (`fallback`) the backup server Serve
    adds for its own proxy, on a port nothing listens on."""
    from ray.serve._private.haproxy import (
        BackendConfig,
        HAProxyApi,
        HAProxyConfig,
        HAProxyManager,
        ServerConfig,
    )
    from ray.serve.config import HTTPOptions

    (folder / "run").mkdir(exist_ok=True)
    cfg = HAProxyConfig(
        socket_path=str(folder / "run" / "admin.sock"),
        server_state_base=str(folder / "state"),
        server_state_file=str(folder / "state" / "server-state"),
        stats_port=free_port(),
        metrics_enabled=False,
        metrics_port=free_port(),
        http_options=HTTPOptions(host="127.0.0.1", port=http_port),
        # With several threads HAProxy's limits are not strict; the retry policy decides what
        # HAProxy replays on another replica (tests/integration/edge/test_replay.py).
        nbthread=int(SERVE_PROCESS_ENV["RAY_SERVE_HAPROXY_NBTHREAD"]),
        retry_on=SERVE_PROCESS_ENV["RAY_SERVE_HAPROXY_RETRY_ON"],
    )
    backend = BackendConfig(
        name=HAProxyManager.get_safe_name(f"http-{app}"),
        path_prefix=route_prefix,
        servers=[
            # Named as Serve names a replica's server (its actor name, made safe).
            ServerConfig(
                HAProxyManager.get_safe_name(f"SERVE_REPLICA::{app}#supervisor#r{i}"),
                "127.0.0.1",
                port,
            )
            for i, port in enumerate(replica_ports, start=1)
        ],
        fallback_server=ServerConfig("head-proxy", "127.0.0.1", free_port()) if fallback else None,
        app_name=app,
        ingress_deployment_name="supervisor",
    )
    path = folder / "haproxy.cfg"
    api = HAProxyApi(cfg, backend_configs={backend.name: backend}, config_file_path=str(path))
    api._generate_config_file_internal()  # the file alone: no HAProxy started
    return path.read_text()


def write_rewritten(result: Any, folder: Path, name: str = "rewritten.cfg") -> Path:
    """A rewritten HAProxy config (app.edge.haproxy_config.Rewritten) on disk, its errorfiles
    where it names them (relative names land in `folder`): the config's path."""
    for path, content in result.errorfiles.items():
        (folder / path).write_bytes(content)
    config = folder / name
    config.write_text(result.text)
    return config
