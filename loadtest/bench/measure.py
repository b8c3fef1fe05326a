"""One run of one system in a bench round: start it, probe it at concurrency 1, search the
highest open-loop load it holds (capacity.step_search), stop it. Which system a name starts
(a peer, the shipped ensemble, the production layout or an ablation variant) is decided here.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.local.processes import free_port
from loadtest.bench import capacity
from loadtest.bench.peers import LegacySystem, PoolCompiledSystem, PoolSystem
from loadtest.bench.variants import PRODUCTION, VARIANTS, Variant
from loadtest.harness.haproxy_admin import HAProxyAdmin, RefusalsReading
from loadtest.harness.isolation import CpuIsolation
from loadtest.harness.locust_runner import LoadResult, LoadTarget, run_locust
from loadtest.harness.probe import latency_probe
from loadtest.harness.resources import ResourceMonitor, tree_cpu_seconds
from loadtest.harness.results import study_log
from loadtest.harness.systems import EnsembleSystem, System, SystemFailed, derived_serve_config

TABLE = "player-features-bench"
log = study_log("bench")


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
    elif name in ("pool", "pool-compiled"):
        kind = PoolSystem if name == "pool" else PoolCompiledSystem
        system = kind(
            ctx.version_dir, ctx.route_prefix, port, ctx.endpoint_url, TABLE, out / f"{name}.log"
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


def member_deployments(system: System) -> dict[str, list[str]] | None:
    """Member deployment -> its members, from GET /v1/ensemble (layout auto plans when the
    application is built, so a run records the layout it measured). None if unreadable."""
    url = f"http://127.0.0.1:{system.port}{system.route_prefix}/v1/ensemble"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            layout = json.load(answer)["layout"]
    except (OSError, ValueError, KeyError):
        return None
    out: dict[str, list[str]] = {}
    for member, where in layout.items():
        if where.get("deployment"):
            out.setdefault(where["deployment"], []).append(member)
    return out


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
        layout = member_deployments(system) if isinstance(system, EnsembleSystem) else None
        if layout is not None:
            log(f"{name}: member deployments {layout or 'none (every member inline)'}")
        with ResourceMonitor(system.process) as monitor:
            probe = latency_probe(
                target.port, target.route_prefix, target.game, target.players, args.probe_requests
            )
            log(f"{name}: c=1 p50 {probe.p50_ms:.1f} ms, p95 {probe.p95_ms:.1f} ms")
            at_rate = (
                _at_fixed_rate(name, system, target, args, out)
                if args.fixed_rate and not args.c1_only
                else {}
            )
            if not args.c1_only:
                refusals = edge_refusals(system)

                def run_level(offered: int) -> bool:
                    step = _level(name, target, offered, args, out, refusals)
                    steps.append(step)
                    return step["held"]

                capacity.step_search(run_level, levels(args.levels), args.refine)
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
        "member_deployments": layout,
        "peak_rss_mb": round(monitor.peak_rss_mb, 1),
        "peak_by_role_mb": monitor.peak_by_role_mb,
        "unclassified_processes": sorted(monitor.unclassified),
        "rss_mb_per_rps": round(monitor.peak_rss_mb / max_rps, 2) if max_rps else None,
        "steps": steps,
        **at_rate,
    }


def _users(rate: float, args: argparse.Namespace) -> int:
    """Locust users that offer `rate` logins/s at `args.user_rps` each."""
    return max(1, round(rate / float(args.user_rps)))


def _open_loop(
    target: LoadTarget, folder: Path, rate: float, seconds: int, args: argparse.Namespace
) -> LoadResult:
    """Locust at `rate` logins/s offered, open loop: users of `args.user_rps` each."""
    return run_locust(
        target,
        folder,
        users=_users(rate, args),
        user_rps=args.user_rps,
        run_time_s=seconds,
        arrivals="open",
    )


def _at_fixed_rate(
    name: str, system: System, target: LoadTarget, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """CPU per login and latency at one fixed open-loop rate, the same for every system:
    the CPU-seconds of the system's whole process tree (Ray's own processes included; the
    load generator is not in it) over the logins answered."""
    assert system.process is not None
    cpu_before = tree_cpu_seconds(system.process.pid)
    result = _open_loop(
        target, out / f"{name}-fixed-{args.fixed_rate:g}", args.fixed_rate, args.fixed_seconds, args
    )
    cpu_s = tree_cpu_seconds(system.process.pid) - cpu_before
    logins = max(result.requests - result.failures, 1)
    cpu_ms = cpu_s * 1000.0 / logins
    log(
        f"{name}: at {args.fixed_rate:g} logins/s: {cpu_ms:.1f} CPU-ms per login, p95 "
        f"{result.p95_ms:.0f} ms, {result.failures} failures, {result.degraded} degraded"
    )
    return {
        "rate_cpu_ms_per_login": round(cpu_ms, 3),
        "rate_p95_ms": result.p95_ms,
        "rate_failures": result.failures,
        "rate_degraded": result.degraded,
    }


def edge_refusals(system: System) -> Callable[[], RefusalsReading] | None:
    """Reads who refused the ensemble's logins at its HAProxy (loadtest.harness.haproxy_admin):
    None for a peer, or an ensemble without HAProxy (the python-proxy variant)."""
    if not isinstance(system, EnsembleSystem) or system.process is None:
        return None
    app = yaml.safe_load(system.config_path.read_text())["applications"][0]["name"]
    backend = f"http-{app}"  # Serve's name for an application's backend
    try:
        admin = HAProxyAdmin.of(system.process.tree())
        backends = admin.backends()
    except (LookupError, OSError, ValueError) as exc:
        log(f"{system.name}: refusals at the edge not recorded: {exc}")
        return None
    if backend not in backends:
        log(f"{system.name}: refusals at the edge not recorded: no {backend} in {backends}")
        return None
    return lambda: admin.refusals(backend)


def _refusals_during(
    read: Callable[[], RefusalsReading] | None, run: Callable[[], Any]
) -> tuple[Any, dict[str, int] | None]:
    """`run()`, and the edge's refusals while it ran. None if unreadable, or if another
    HAProxy process answered afterwards (Serve replaces it when the replicas change, and the
    new one counts from zero)."""
    before = _read(read)
    result = run()
    after = _read(read)
    if before is None or after is None or before.pid != after.pid:
        return result, None
    return result, (after.refusals - before.refusals).as_dict()


def _read(read: Callable[[], RefusalsReading] | None) -> RefusalsReading | None:
    if read is None:
        return None
    try:
        return read()
    except (LookupError, OSError, ValueError):
        return None


def levels(spec: str) -> list[int]:
    return [int(x) for x in spec.split(",") if x.strip()]


def _level(
    name: str,
    target: LoadTarget,
    offered: int,
    args: argparse.Namespace,
    out: Path,
    refusals: Callable[[], RefusalsReading] | None = None,
) -> dict[str, Any]:
    result, refused = _refusals_during(
        refusals,
        lambda: _open_loop(
            target, out / f"{name}-step-{offered:04d}", offered, args.step_seconds, args
        ),
    )
    verdict = capacity.judge(result, offered)
    log(
        f"{name}: {offered:>4} rps offered -> {result.total_rps:6.1f} achieved "
        f"({result.rps:.1f} logins/s), p50 {result.p50_ms:.0f} / p95 {result.p95_ms:.0f} / "
        f"p99 {result.p99_ms:.0f} ms: "
        + ("held" if verdict.held else "NOT held: " + "; ".join(verdict.reasons))
        + (f" (edge: {refused})" if refused and any(refused.values()) else "")
    )
    return {
        "offered_rps": offered,
        "users": _users(offered, args),
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
        # Who refused (HAProxy's queue cap or queue timeout, or a supervisor), for the
        # ensemble through HAProxy; None otherwise (loadtest.harness.haproxy_admin.Refusals).
        "edge_refusals": refused,
    }
