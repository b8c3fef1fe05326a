"""The benchmark: the Ray Serve ensemble against its two single-machine peers, in rounds.

    make bench                                   # profile "standard", 3 rounds
    make bench PROFILE=heavy BENCH_ARGS=--c1-only
    .venv/bin/python -m loadtest.bench --rounds 3 --ablation python-proxy,no-coalescing

Systems, all from the same manifest, feature table and HTTP API:
  legacy               the "before" server: uvicorn, one worker per core, GetItem per login,
                       members one after another (loadtest.legacy_server)
  pool                 one async web process and a process pool, one worker per core, each
                       holding every member, with the ensemble's feature cache, batched reads
                       and coalescing (loadtest.pool_server)
  ensemble             serve_config.yaml as shipped, through its documented ingress
  ensemble-production  serve_config.production-layout.yaml (one deployment per member)
plus any --ablation variants (loadtest.variants): the shipped config with one lever off.

Each round starts every system in turn (A B C D, A B C D, ...), probes it at concurrency 1,
runs the step search for the highest open-loop load it holds (loadtest.capacity), and stops
it. Every figure is reported as the median of the rounds with its min-max spread, and a
ratio counts only where the spreads do not overlap. The benchmark runs in one cgroup and
each system in another (loadtest.isolation). Results go to loadtest/results/<timestamp>/
(report.json, report.md, latency.png, raw locust output per round).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps
from loadtest import capacity
from loadtest import report as reports
from loadtest.isolation import CpuIsolation
from loadtest.locust_runner import LoadTarget, run_locust
from loadtest.probe import latency_probe
from loadtest.resources import ResourceMonitor
from loadtest.systems import (
    EnsembleSystem,
    LegacySystem,
    PoolSystem,
    System,
    SystemFailed,
    derived_serve_config,
    run_interruptible,
)
from loadtest.variants import PRODUCTION, VARIANTS, Variant
from models.train import ensure_trained

RESULTS = PROJECT_ROOT / "loadtest" / "results"
TABLE = "player-features-bench"
SYSTEMS = ("legacy", "pool", "ensemble", "ensemble-production")
# Coarse steps (x1.5); the search then refines between the last held level and the first
# failed one in x1.15 steps.
DEFAULT_LEVELS = "10,15,22,33,50,75,110,165,250,375"
GENERATOR = (
    "locust {version}, open arrivals: {users} users x {user_rps} logins/s each, "
    "on a fixed schedule from a random phase"
)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Context:
    args: argparse.Namespace
    folder: Path
    endpoint_url: str
    version_dir: Path
    route_prefix: str
    game: str
    isolation: CpuIsolation


def make_system(name: str, ctx: Context, out: Path) -> System:
    port = free_port()
    if name == "legacy":
        system: System = LegacySystem(
            ctx.version_dir, ctx.route_prefix, port, ctx.endpoint_url, TABLE, out / "legacy.log"
        )
    elif name == "pool":
        system = PoolSystem(
            ctx.version_dir, ctx.route_prefix, port, ctx.endpoint_url, TABLE, out / "pool.log"
        )
    elif name == "ensemble":
        system = _ensemble(ctx, out, None, ctx.args.config)
    elif name == "ensemble-production":
        system = _ensemble(ctx, out, None, ctx.args.production_config)
        system.name = name
    else:
        variant = VARIANTS[name]
        base = ctx.args.production_config if variant.base == PRODUCTION else ctx.args.config
        system = _ensemble(ctx, out, variant, base)
    system.before_exec = ctx.isolation.enter_system
    return system


def _ensemble(ctx: Context, out: Path, variant: Variant | None, base: Path) -> EnsembleSystem:
    label = variant.name if variant else base.stem
    port = free_port()
    config, prefix, ray_env = derived_serve_config(
        base,
        profile=ctx.args.profile,
        port=port,
        endpoint_url=ctx.endpoint_url,
        table=TABLE,
        out=out / f"{label}.yaml",
        variant=variant,
    )
    if variant is not None and variant.direct_ingress:
        # Serve gives the ingress replica the first free port from this range.
        port = free_port()
        ray_env |= {
            "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
            "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 50),
        }
    system = EnsembleSystem(config, prefix, port, out / f"{label}.log", ray_env)
    if variant is not None:
        system.name = variant.name
    return system


def measure(name: str, ctx: Context, out: Path) -> dict[str, Any]:
    """One run of one system: start, c=1 probe, step search, stop."""
    args = ctx.args
    system = make_system(name, ctx, out)
    target = LoadTarget(system.port, system.route_prefix, ctx.game, args.players)
    started = time.monotonic()
    steps: list[dict[str, Any]] = []
    try:
        system.start()
        assert system.process is not None
        ready_s = time.monotonic() - started
        log(f"{name}: ready after {ready_s:.0f}s")
        with ResourceMonitor(system.process) as monitor:
            probe = latency_probe(
                target.port, target.route_prefix, target.game, target.players, args.probe_requests
            )
            log(f"{name}: c=1 p50 {probe.p50_ms:.1f} ms, p95 {probe.p95_ms:.1f} ms")
            if not args.c1_only:

                def run_level(offered: int) -> bool:
                    step = _level(name, target, offered, args, out)
                    steps.append(step)
                    return step["held"]

                capacity.step_search(run_level, _levels(args.levels), args.refine)
    except (SystemFailed, RuntimeError, OSError) as exc:
        # A system that dies or will not start is a result too; the rounds go on.
        log(f"{name}: FAILED: {exc}")
        return {"error": str(exc), "steps": steps}
    finally:
        system.stop()
    held = [s for s in steps if s["held"]]
    max_rps = max((s["rps"] for s in held), default=0.0) if steps else None
    return {
        "ready_s": round(ready_s, 1),
        "c1_p50_ms": round(probe.p50_ms, 3),
        "c1_p95_ms": round(probe.p95_ms, 3),
        "c1_p99_ms": round(probe.p99_ms, 3),
        "c1_errors": probe.errors,
        "max_rps_held": max_rps,
        "max_offered_held": max((s["offered_rps"] for s in held), default=0) if steps else None,
        "peak_rss_mb": round(monitor.peak_rss_mb, 1),
        "peak_by_role_mb": monitor.peak_by_role_mb,
        "unclassified_processes": sorted(monitor.unclassified),
        "rss_mb_per_rps": round(monitor.peak_rss_mb / max_rps, 2) if max_rps else None,
        "steps": steps,
    }


def _levels(spec: str) -> list[int]:
    return [int(x) for x in spec.split(",") if x.strip()]


def _level(
    name: str, target: LoadTarget, offered: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    users = max(1, round(offered / args.user_rps))
    result = run_locust(
        target,
        out / f"{name}-step-{offered:04d}",
        users=users,
        user_rps=args.user_rps,
        run_time_s=args.step_seconds,
        arrivals="open",
    )
    verdict = capacity.judge(result, offered)
    log(
        f"{name}: {offered:>4} rps offered -> {result.total_rps:6.1f} achieved "
        f"({result.rps:.1f} logins/s), p50 {result.p50_ms:.0f} / p95 {result.p95_ms:.0f} / "
        f"p99 {result.p99_ms:.0f} ms: "
        + ("held" if verdict.held else "NOT held: " + "; ".join(verdict.reasons))
    )
    return {
        "offered_rps": offered,
        "users": users,
        "held": verdict.held,
        "not_held_because": list(verdict.reasons),
        "requests": result.requests,
        "failures": result.failures,
        "degraded": result.degraded,
        "total_rps": round(result.total_rps, 2),
        "rps": round(result.rps, 2),
        "p50_ms": result.p50_ms,
        "p95_ms": result.p95_ms,
        "p99_ms": result.p99_ms,
        "fallback_share": round(result.fallback_share, 6),
        "outcomes": result.outcomes,
    }


def machine_info() -> dict[str, Any]:
    import ray

    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "ray": ray.__version__,
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    folder = RESULTS / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder.mkdir(parents=True)
    contenders = [*args.systems, *args.ablation]
    report: dict[str, Any] = {
        "profile": args.profile,
        "command": args.command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "game": app.args.game,
        "version": app.args.version,
        "rounds": args.rounds,
        "order": contenders,
        "settings": {
            "players": args.players,
            "levels": _levels(args.levels),
            "refine": args.refine,
            "user_rps": args.user_rps,
            "step_seconds": args.step_seconds,
            "probe_requests": args.probe_requests,
            "c1_only": args.c1_only,
            "held_rule": {
                "p95_ms_max": capacity.P95_TARGET_MS,
                "failures": 0,
                "achieved_share_min": capacity.MIN_ACHIEVED_SHARE,
                "degraded_fallbacks": 0,
                "retries": 0,
            },
        },
        "load_generator": GENERATOR.format(
            version=importlib.metadata.version("locust"),
            users="offered / user_rps",
            user_rps=args.user_rps,
        ),
        "descriptions": {name: VARIANTS[name].description for name in args.ablation},
        "runs": {name: [] for name in contenders},
    }
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
                for name in contenders:
                    log(f"round {number}/{args.rounds}: {name}")
                    out = folder / f"round-{number}"
                    run_ = measure(name, ctx, out)
                    report["runs"][name].append({"round": number, **run_})
                    # Written after every run: an interrupted benchmark keeps what it measured.
                    reports.write_json(report, folder)

    report["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    reports.summarise(report)
    reports.write_json(report, folder)
    reports.write_markdown(report, folder)
    reports.write_plot(report, folder)
    print()
    print(reports.summary_table(report))
    print()
    print(reports.targets_table(report))
    if args.ablation:
        print()
        print(reports.ablation_table(report))
    print()
    log(f"report: {folder / 'report.md'}")
    return folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--levels", default=DEFAULT_LEVELS, help="coarse offered-RPS steps")
    parser.add_argument("--refine", type=float, default=1.15, help="refinement step factor")
    parser.add_argument("--step-seconds", type=int, default=15)
    parser.add_argument("--user-rps", type=float, default=0.5, help="logins/s per locust user")
    parser.add_argument("--probe-requests", type=int, default=300)
    parser.add_argument("--c1-only", action="store_true", help="c=1 probe only, no step search")
    parser.add_argument(
        "--no-isolation",
        dest="isolation",
        action="store_false",
        help="do not put the benchmark and the system under test in separate cgroups",
    )
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    args.ablation = [v for v in args.ablation.split(",") if v]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    unknown += [v for v in args.ablation if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown systems/variants {unknown}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.command = shlex.join(["python", "-m", "loadtest.bench", *(argv or sys.argv[1:])])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_interruptible(lambda: run(args), log)


if __name__ == "__main__":
    sys.exit(main())
