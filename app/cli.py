"""Local operations: train what serve_config.yaml needs, seed dynalite, run everything.

    python -m app.cli prepare   [--config serve_config.yaml]
    python -m app.cli seed      [--config serve_config.yaml] [--players 10000]
    python -m app.cli run-local [--config serve_config.yaml] [--players 10000]

`run-local` is what `make run` calls: it starts dynalite (data in .local/, git-ignored),
creates and seeds the table if needed, then runs `serve run` in the foreground. Ctrl-C stops
Serve first, then dynalite.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.local_dynamo import PROJECT_ROOT, Dynalite, local_client
from app.serve_config import SERVE_PROCESS_ENV, ConfiguredApp, configured_apps, local_endpoint

DEFAULT_CONFIG = PROJECT_ROOT / "serve_config.yaml"
LOCAL_STATE = PROJECT_ROOT / ".local"
POPULATION_SEED = 20261

log = logging.getLogger("offers")


def prepare(apps: list[ConfiguredApp]) -> None:
    """Train (or find cached) every ensemble version the config serves."""
    from models.train import ensure_trained

    for app in apps:
        started = time.perf_counter()
        folder = ensure_trained(
            app.args.game, app.args.version, app.args.profile, root=app.args.artifacts_root
        )
        log.info("models ready: %s (%.1fs)", folder, time.perf_counter() - started)


def seed(apps: list[ConfiguredApp], client, table: str, players: int) -> None:
    from app.seeding import ensure_table, seed_game

    if ensure_table(client, table):
        log.info("created table %s", table)
    for game in sorted({a.args.game for a in apps}):
        started = time.perf_counter()
        written = seed_game(client, table, game, players, seed=POPULATION_SEED)
        if written:
            log.info("seeded %d %s players (%.1fs)", written, game, time.perf_counter() - started)
        else:
            log.info("%s players already seeded", game)


def run_local(config: Path, apps: list[ConfiguredApp], players: int) -> int:
    prepare(apps)
    host, port, table = local_endpoint(apps)
    LOCAL_STATE.mkdir(exist_ok=True)
    dynalite = Dynalite(
        port, LOCAL_STATE / "dynalite", host=host, log_path=LOCAL_STATE / "dynalite.log"
    )
    with dynalite:
        log.info("dynalite on %s (pid %s)", dynalite.endpoint_url, dynalite.pid)
        seed(apps, dynalite.client(timeout_s=10.0), table, players)
        for app in apps:
            log.info("serving %s at http://127.0.0.1:8000%s/v1/offers", app.name, app.route_prefix)
        return _run_serve(config)


def _run_serve(config: Path) -> int:
    serve_cli = Path(sys.executable).with_name("serve")
    child = subprocess.Popen(
        [str(serve_cli), "run", str(config)],
        cwd=PROJECT_ROOT,
        # Serve's process-level performance settings; the caller's environment wins.
        env={**SERVE_PROCESS_ENV, **os.environ},
        # A shell that starts us in the background leaves SIGINT ignored, and the child would
        # inherit that; reset it so `serve run` always shuts its Ray down on SIGINT.
        preexec_fn=_default_sigint,
    )

    # A terminal Ctrl-C reaches `serve run` by itself (same process group); a SIGTERM to us
    # is forwarded as SIGINT so `serve run` shuts its Ray instance down cleanly either way.
    def forward(signum: int, _frame) -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            forward(signal.SIGINT, None)
            try:
                return child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C must always unwind (stopping Serve, then dynalite), even if we were started with
    # SIGINT ignored (a background job of a non-interactive shell).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser(prog="python -m app.cli", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["prepare", "seed", "run-local"])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--players", type=int, default=10_000, help="players seeded per game")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    apps = configured_apps(args.config)
    if not apps:
        parser.error(f"{args.config} declares no ensemble applications")
    if args.command == "prepare":
        prepare(apps)
        return 0
    if args.command == "seed":
        host, port, table = local_endpoint(apps)
        seed(apps, local_client(f"http://{host}:{port}", timeout_s=10.0), table, args.players)
        return 0
    return run_local(args.config, apps, args.players)


if __name__ == "__main__":
    sys.exit(main())
