"""Where the ensemble's c=1 latency goes against legacy's: the same probe as the bench's c=1,
over paths that each remove one difference, interleaved in rounds.

    .venv/bin/python -m loadtest.bench.c1_path --rounds 5

Starts the shipped ensemble (serve_config.yaml's first application, the bench's derived
config, through Serve's HAProxy ingress with the edge's admission) and the legacy peer
side by side against one seeded dynalite, then probes, in every round, in an order of the
round's own (shuffled with `--seed`):

  legacy                   the bench's c=1: one keep-alive connection, so one uvicorn worker
  legacy, paced            the same, `--think-ms` between logins
  replica                  one supervisor replica's own direct-ingress port (no HAProxy)
  replica, paced           the same, `--think-ms` between logins
  haproxy, one replica     through HAProxy, every other replica of the backend in `maint`
  haproxy                  through HAProxy as shipped (`balance leastconn` over the replicas)

Every probe logs in players no other probe does (disjoint blocks of the seeded table): the
supervisors' 30 s feature cache would otherwise answer a later probe's reads, and legacy
has none. What each difference costs, paired
within each round: HAProxy's hop = "haproxy, one replica" − "replica"; spreading
logins over the replicas = "haproxy" − "haproxy, one replica"; the replica's own path
against legacy's = "replica" − "legacy"; idle time between logins = the paced paths − their
back-to-back ones. Nothing is isolated by cgroup here (unlike the bench): both systems share
the host, idle while the other is probed. Writes loadtest/results/<timestamp>-c1path/
(c1_path.json) and prints a table of medians with their min-max.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.config.settings import get_settings
from app.local.processes import PROJECT_ROOT, free_port
from app.local.serve_config import configured_apps
from loadtest.bench.peers import LegacySystem
from loadtest.harness.haproxy_admin import BackendServer, HAProxyAdmin
from loadtest.harness.probe import ProbeResult, latency_probe
from loadtest.harness.results import Study, machine_info, spread
from loadtest.harness.systems import EnsembleSystem, seeded_ensemble
from models.train import ensure_trained

TABLE = "player-features-c1path"
WARMUP = 30  # untimed logins at the start of every probe
PATHS = (
    "legacy",
    "legacy, paced",
    "replica",
    "replica, paced",
    "haproxy, one replica",
    "haproxy",
)
# name -> (minuend, subtrahend): what one difference between the two systems costs.
DIFFERENCES = {
    "haproxy's hop": ("haproxy, one replica", "replica"),
    "spreading over the replicas": ("haproxy", "haproxy, one replica"),
    "replica's path against legacy's": ("replica", "legacy"),
    "idle time, replica": ("replica, paced", "replica"),
    "idle time, legacy": ("legacy, paced", "legacy"),
    "as the bench sees it (haproxy against legacy)": ("haproxy", "legacy"),
}

STUDY = Study("loadtest.bench.c1_path", __doc__, "c1path")
log = STUDY.log


def differences(runs: dict[str, list[float]]) -> dict[str, dict[str, float] | None]:
    """Each of DIFFERENCES, paired within each round (the two probes ran a few seconds
    apart): the median of the rounds' differences of p50 (ms), with its min-max."""
    out: dict[str, dict[str, float] | None] = {}
    for name, (minuend, subtrahend) in DIFFERENCES.items():
        pairs = zip(runs.get(minuend, []), runs.get(subtrahend, []), strict=False)
        out[name] = spread((a - b for a, b in pairs), digits=2)
    return out


@contextmanager
def only_replica(admin: HAProxyAdmin, backend: str, others: list[BackendServer]) -> Iterator[None]:
    """`others` (every replica server of `backend` but one) in `maint` for the block, each
    put back to `ready` afterwards, also when the block or one of the changes fails."""
    changed: list[BackendServer] = []
    try:
        for server in others:
            admin.set_state(backend, server.name, "maint")
            changed.append(server)
        yield
    finally:
        failed: list[str] = []
        for server in changed:
            try:
                admin.set_state(backend, server.name, "ready")
            except (OSError, RuntimeError) as exc:
                failed.append(f"{server.name}: {exc}")
        if failed:
            raise RuntimeError(f"replicas left out of rotation: {failed}")


def player_blocks(rounds: int, paths: int, per_probe: int) -> list[list[range]]:
    """Disjoint blocks of player indices, one per probe of each round: no probe meets a
    player another probe logged in, in either system's feature cache."""
    blocks = [range(i * per_probe, (i + 1) * per_probe) for i in range(rounds * paths)]
    return [blocks[r * paths : (r + 1) * paths] for r in range(rounds)]


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    folder = STUDY.folder("c1path")
    version_dir = ensure_trained(
        app.args.game, app.args.version, args.profile, root=get_settings().artifacts_root
    )
    game = app.args.game
    think_s = args.think_ms / 1000.0
    per_probe = WARMUP + args.requests
    blocks = player_blocks(args.rounds, len(PATHS), per_probe)
    players = args.rounds * len(PATHS) * per_probe
    order = random.Random(args.seed)
    with seeded_ensemble(
        args.config, profile=args.profile, game=game, players=players, table=TABLE, folder=folder
    ) as seeded:
        prefix, port = seeded.route_prefix, seeded.port
        ensemble = EnsembleSystem(
            seeded.config, prefix, port, folder / "ensemble.log", seeded.ray_env
        )
        legacy = LegacySystem(
            version_dir,
            prefix,
            free_port(),
            seeded.dynalite.endpoint_url,
            TABLE,
            folder / "legacy.log",
        )
        with ensemble, legacy:
            assert ensemble.process is not None
            admin = HAProxyAdmin.of(ensemble.process.tree())
            backend = f"http-{app.name}"
            replicas = [s for s in admin.servers(backend) if s.is_replica]
            if len(replicas) < 2:
                raise SystemExit(f"{backend} has {len(replicas)} replica server(s); need 2+")
            keep, others = replicas[0], replicas[1:]
            log(f"{backend}: replicas {[(s.name, s.port) for s in replicas]}; probing {keep.port}")

            def probe(port_: int, think: float, ids: list[int]) -> ProbeResult:
                return latency_probe(
                    port_, prefix, game, players, args.requests, WARMUP,
                    think_s=think, player_ids=ids,
                )  # fmt: skip

            ports = {
                "legacy": (legacy.port, 0.0),
                "legacy, paced": (legacy.port, think_s),
                "replica": (keep.port, 0.0),
                "replica, paced": (keep.port, think_s),
                "haproxy, one replica": (port, 0.0),
                "haproxy": (port, 0.0),
            }
            runs: dict[str, list[float]] = {name: [] for name in PATHS}
            errors: dict[str, int] = dict.fromkeys(PATHS, 0)
            for round_, round_blocks in enumerate(blocks, start=1):
                # A new order every round (seeded): no path always follows the same one.
                shuffled = order.sample(PATHS, len(PATHS))
                for name, block in zip(shuffled, round_blocks, strict=True):
                    port_, think = ports[name]

                    ids = list(block)
                    if name == "haproxy, one replica":
                        with only_replica(admin, backend, others):
                            result = probe(port_, think, ids)
                    else:
                        result = probe(port_, think, ids)
                    runs[name].append(result.p50_ms)
                    errors[name] += result.errors
                    log(f"round {round_} {name}: c=1 p50 {result.p50_ms:.2f} ms")
                    time.sleep(0.5)
    p50s = {name: spread(values, digits=2) for name, values in runs.items()}
    report: dict[str, Any] = {
        "command": args.command,
        "machine": machine_info(),
        "rounds": args.rounds,
        "requests_per_probe": args.requests,
        "think_ms": args.think_ms,
        "order_seed": args.seed,
        "errors": errors,
        "c1_p50_ms": p50s,
        "differences_ms": differences(runs),
        "runs": runs,
    }
    STUDY.save(folder, "c1_path.json", report)
    print("| path | c=1 p50 (ms), median [min–max] |\n|---|---|")
    for name, s in p50s.items():
        print(f"| {name} | {s['median']} [{s['min']}–{s['max']}] |" if s else f"| {name} | - |")
    print("\n| difference | ms, median of the rounds' differences [min–max] |\n|---|---|")
    for name, d in report["differences_ms"].items():
        print(f"| {name} | {d['median']} [{d['min']}–{d['max']}] |" if d else f"| {name} | - |")
    print(f"errors (non-200 answers, timed in p50 all the same): {errors}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser()
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--profile", default="standard", help="member-cost profile")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300, help="timed logins per probe")
    parser.add_argument("--seed", type=int, default=7, help="of the probes' order per round")
    parser.add_argument(
        "--think-ms", type=float, default=12.0, help="pause between logins of a paced probe"
    )
    args = STUDY.parse(parser, argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
