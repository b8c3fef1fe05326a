"""The benchmark: the Ray Serve ensemble against its two single-machine peers, in rounds.

    make bench                                   # profile "standard", 3 rounds
    make bench PROFILE=heavy BENCH_ARGS=--c1-only
    .venv/bin/python -m loadtest.bench --rounds 3 --ablation python-proxy,no-coalescing

Systems, all from the same manifest, feature table and HTTP API:
  legacy               the "before" server: uvicorn, one worker per core, GetItem per login,
                       members one after another (loadtest.bench.legacy_server)
  pool                 one async web process and a process pool, one worker per core, each
                       holding every member, with the ensemble's feature cache, batched reads
                       and coalescing (loadtest.bench.pool_server), native predicts
  pool-compiled        the same pool scoring the compiled members (ONNX Runtime), as the
                       ensemble does: the two then differ only in their architecture
  ensemble             serve_config.yaml as shipped, through its documented ingress
  ensemble-production  serve_config.production-layout.yaml (one deployment per member)
plus any --ablation variants (loadtest.bench.variants): the shipped config with one lever off.

Each round starts every system in turn (A B C D, A B C D, ...), probes it at concurrency 1,
runs the step search for the highest open-loop load it holds (loadtest.bench.capacity), and stops
it. Every figure is reported as the median of the rounds with its min-max spread, and a
ratio counts only where the spreads do not overlap. The benchmark runs in one cgroup and
each system in another (loadtest.harness.isolation). Results go to loadtest/results/<timestamp>/
(report.json, report.md, latency.png, raw locust output per round).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps
from loadtest.bench import report as reports
from loadtest.bench.measure import TABLE, Context, log, measure
from loadtest.bench.variants import VARIANTS
from loadtest.harness.isolation import CpuIsolation
from loadtest.harness.results import Study, machine_info
from models.train import ensure_trained

STUDY = Study("loadtest.bench", __doc__, "bench")

SYSTEMS = ("legacy", "pool", "pool-compiled", "ensemble", "ensemble-production")
# Coarse steps (x1.5); the search then refines between the last held level and the first
# failed one in x1.15 steps.
DEFAULT_LEVELS = "10,15,22,33,50,75,110,165,250,375"


def run(args: argparse.Namespace) -> Path:
    """Rounds of every contender in turn, against one seeded table; then the report."""
    app = configured_apps(args.config)[0]
    folder = STUDY.folder()
    report = reports.new_report(args, app.args.game, app.args.version, machine_info())
    log(f"results in {folder}")
    started = time.perf_counter()
    version_dir = ensure_trained(
        app.args.game, app.args.version, args.profile, root=get_settings().artifacts_root
    )
    log(f"models ready: {version_dir} ({time.perf_counter() - started:.0f}s)")

    with CpuIsolation(enabled=args.isolation) as isolation:
        report["isolation"] = isolation.describe()
        log(f"CPU isolation: {report['isolation']}")
        with Dynalite(free_port(), data_dir=None, log_path=folder / "dynalite.log") as dynalite:
            client = dynalite.client(timeout_s=10.0)
            ensure_table(client, TABLE)
            seed_game(client, TABLE, app.args.game, args.players)
            log(f"dynalite on {dynalite.endpoint_url}, {args.players} players")
            ctx = Context(
                args, folder, dynalite.endpoint_url, version_dir, app.route_prefix,
                app.args.game, isolation,
            )  # fmt: skip
            for number in range(1, args.rounds + 1):
                for name in report["order"]:
                    log(f"round {number}/{args.rounds}: {name}")
                    run_ = measure(name, ctx, folder / f"round-{number}")
                    report["runs"][name].append({"round": number, **run_})
                    # Written after every run: an interrupted benchmark keeps what it measured.
                    reports.write_json(report, folder)

    reports.finish(report, folder)
    log(f"report: {folder / 'report.md'}")
    return folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = STUDY.parser(rounds=3)
    parser.add_argument("--profile", default="standard", help="member-cost profile")
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument(
        "--production-config",
        type=Path,
        default=PROJECT_ROOT / "serve_config.production-layout.yaml",
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="in round order")
    parser.add_argument(
        "--ablation",
        default="",
        help=f"comma-separated variants measured in every round after the systems: "
        f"{', '.join(VARIANTS)}",
    )
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--levels", default=DEFAULT_LEVELS, help="coarse offered-RPS steps")
    parser.add_argument("--refine", type=float, default=1.15, help="refinement step factor")
    parser.add_argument("--step-seconds", type=int, default=15)
    parser.add_argument("--user-rps", type=float, default=0.5, help="logins/s per locust user")
    parser.add_argument("--probe-requests", type=int, default=300)
    parser.add_argument("--c1-only", action="store_true", help="c=1 probe only, no step search")
    parser.add_argument(
        "--fixed-rate",
        type=float,
        default=40.0,
        help="also run each system at this open-loop rate (logins/s) and report its CPU-ms "
        "per login and p95 (0: skip)",
    )
    parser.add_argument("--fixed-seconds", type=int, default=30)
    parser.add_argument(
        "--no-isolation",
        dest="isolation",
        action="store_false",
        help="do not put the benchmark and the system under test in separate cgroups",
    )
    args = STUDY.parse(parser, argv)
    args.systems = [s for s in args.systems.split(",") if s]
    args.ablation = [v for v in args.ablation.split(",") if v]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    unknown += [v for v in args.ablation if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown systems/variants {unknown}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return STUDY.run(lambda: run(args))

