"""The reliability scenarios: what load each sends, which fault it injects and when, and how
one is run and summarized (every login timed at the client, the SLA checked per answer)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from app.local.dynalite import Dynalite
from loadtest.harness.cluster import LocalCluster
from loadtest.harness.haproxy_admin import HAProxyAdmin, RefusalsReading
from loadtest.harness.open_loop import (
    Caller,
    Shot,
    burst,
    closed_loop,
    constant_rate,
    one_player,
    open_loop,
    percentile,
    random_players,
    run_client,
    summarize,
)
from loadtest.harness.results import study_log
from loadtest.reliability.faults import (
    DelayProxyProcess,
    abort_mid_request,
    ray_sessions,
    replica_pids,
)
from loadtest.reliability.host_faults import (
    cpu_neighbours,
    listening_pid,
    neighbours_for,
    pause_for,
    running_replicas,
    seconds_until_replaced,
)
from loadtest.reliability.report import plot
from loadtest.reliability.startup_trace import replica_starts, traced
from loadtest.reliability.targets import Target
from models.population import player_id

FAULT_AT_S = 8.0
DYNAMO_SLOW_S = 12.0
DYNAMO_DELAY_MS = 800.0
SLACK_MS = 100.0  # the target: every accepted answer within budget + 100 ms
HOT_CLIENTS = (50, 100)
BURSTS = (200, 500, 1000)
HEALTH_WATCH_S = 60.0  # version_down: how long to wait for the version's route to answer
SLOWDOWNS = (2, 3)  # slow_host_<n>x: the service gets 1/n of the cores it wants
STORE_PAUSED_S = 12.0  # tier_outage_fresh: how long DynamoDB answers nothing

log = study_log("reliability")


class FaultNotApplied(Exception):
    """The fault has nothing to act on in this deployment (e.g. no member replica when every
    member is inline): the run is recorded as steady load with `fault_applied: false`, not
    as a fault survived."""


@dataclass
class Scenario:
    name: str
    load: Callable[[Caller], Any]  # returns the coroutine producing the shots
    fault: Callable[[], str] | None = None  # acts, returns what it did
    notes: dict[str, Any] = field(default_factory=dict)
    route: str = "version"  # which of Target.routes the logins go to
    # CPU-bound neighbour processes on the host for the whole run (slow_host_*).
    neighbours: int = 0


def back_on_version_after_s(shots: list[Shot], fault_at: float, version: str) -> float | None:
    """Seconds from the fault until every later login was answered by its own version again
    (not rerouted). None: not by the end of the run."""
    later = [s for s in shots if s.sent_s >= fault_at]
    away = [s.sent_s for s in later if s.version != version or s.rerouted_reason is not None]
    if not away:
        return 0.0
    if max(away) >= later[-1].sent_s:
        return None
    return round(max(away) - fault_at, 2)


def timed_from_kills(restarts: dict[str, Any], origin: float, shots: list[Shot]) -> dict[str, Any]:
    """A restart scenario's figures, each timed from its kill (`_kills`: time.monotonic()
    at each SIGKILL) on the run's clock (`origin`), not from FAULT_AT_S, when the fault only
    starts looking up the replicas to kill: `fault_at_s` (the first kill), personalized again
    after it, and after the last kill when there were two."""
    figures = {key: value for key, value in restarts.items() if not key.startswith("_")}
    kills = [round(kill - origin, 2) for kill in restarts.get("_kills", [])]
    if kills:
        figures["fault_at_s"] = kills[0]
        figures["recovered_after_s"] = recovered_after_s(shots, kills[0])
    if len(kills) > 1:
        figures["all_killed_at_s"] = kills[-1]
        figures["all_personalized_again_after_s"] = recovered_after_s(shots, kills[-1])
    return figures


def trace_restarts(restarts: dict[str, Any], target: Target) -> dict[str, Any]:
    """Where each kill's way back went (startup_trace), from the Ray session's logs: one
    `<key>_steps` list per kill, each kill's starts up to the next kill. Only a reading: a
    trace that fails is logged and left empty, never ends the scenario."""
    traces = restarts.get("_traces", [])
    ends = [killed for _, killed in traces[1:]] + [None]
    out: dict[str, Any] = {}
    try:
        sessions = ray_sessions(target.cluster)
    except Exception as exc:
        log(f"way back not traced: {exc!r}")
        sessions = []
    for (key, killed), until in zip(traces, ends, strict=True):
        try:
            starts = replica_starts(sessions, target.version_app, "supervisor", killed, until)
            steps = traced(starts, restarts.get(key))
        except Exception as exc:
            log(f"way back not traced: {exc!r}")
            steps = []
        out[key.removesuffix("_after_s") + "_steps"] = steps
    return out


def recovered_after_s(shots: list[Shot], fault_at: float) -> float | None:
    """Seconds from the fault until every later login got a full answer: 200 and personalized
    (or the unknown-player fallback, which no fault causes). None: not by the end of the run."""

    def full(s: Shot) -> bool:
        return s.status == 200 and (s.personalized or s.fallback_reason == "unknown_player")

    later = [s for s in shots if s.sent_s >= fault_at]
    if not later:
        return None
    last_bad = max((s.sent_s for s in later if not full(s)), default=None)
    if last_bad is None:
        return 0.0
    if last_bad >= later[-1].sent_s:
        return None
    return round(last_bad - fault_at, 2)


def client_floor(port: int, n: int, client_loop: str = "asyncio") -> float | None:
    """p99 of a burst of n at HAProxy's own /-/healthz (no Python server behind it): what this
    client on this host cannot go below, whatever the service does."""
    import aiohttp

    async def run() -> list[float]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one() -> float:
                t = time.monotonic()
                async with session.get(f"http://127.0.0.1:{port}/-/healthz") as response:
                    await response.read()
                return (time.monotonic() - t) * 1000.0

            return list(await asyncio.gather(*(one() for _ in range(n))))

    return percentile(run_client(run(), client_loop), 99)


def client_floors(port: int, client_loop: str = "asyncio") -> dict[str, dict[str, float | None]]:
    """The client floor of each burst size on this host as it is (`host`), and with each
    slow_host scenario's neighbours running: they slow this client as much as the service,
    and a refusal can be no faster than the client sees HAProxy's own answer."""
    floors = {"host": {f"burst_{n}": client_floor(port, n, client_loop) for n in BURSTS}}
    for slowdown in SLOWDOWNS:
        with cpu_neighbours(neighbours_for(slowdown)):
            time.sleep(1)  # the neighbours running before the first send
            floors[f"slow_host_{slowdown}x"] = {
                f"burst_{n}": client_floor(port, n, client_loop) for n in BURSTS
            }
    return floors


def build_scenarios(args: argparse.Namespace, target: Target) -> list[Scenario]:
    players = random_players(args.players)
    # Seeded players only: whether each has a precomputed offer is the tier's question.
    known_players = random_players(args.players, unknown_share=0.0)
    hot = player_id(7)
    canary = target.canary_players

    def steady(caller: Caller) -> Any:
        return open_loop(caller, constant_rate(args.rate, args.seconds), players)

    def kill(deployment: str, every: bool = False) -> Callable[[], str]:
        def act() -> str:
            pids = replica_pids(target.version_app, deployment, target.cluster)
            if not pids:
                raise FaultNotApplied(f"no {deployment} replica to kill in {target.version_app}")
            victims = pids if every else pids[:1]
            for pid in victims:
                psutil.Process(pid).send_signal(signal.SIGKILL)
            return f"SIGKILL {target.version_app} {deployment} pids {victims} (of {len(pids)})"

        return act

    scenarios: list[Scenario] = []
    for route in ("version", "game"):
        tag = "" if route == "version" else "_game"
        scenarios += [
            Scenario(f"steady{tag}", steady, route=route),
            # Twice what the bench held on this host (--held-rate), for --seconds.
            Scenario(
                f"overload_2x{tag}",
                lambda c: open_loop(c, constant_rate(2 * args.held_rate, args.seconds), players),
                notes={"offered_per_s": 2 * args.held_rate},
                route=route,
            ),
            *(
                Scenario(
                    f"burst_{n}{tag}", lambda c, n=n: open_loop(c, burst(n), players), route=route
                )
                for n in BURSTS
            ),
            *(
                Scenario(
                    f"hot_player_{k}{tag}",
                    lambda c, k=k: closed_loop(c, k, min(args.seconds, 20), one_player(hot)),
                    notes={"player": hot},
                    route=route,
                )
                for k in HOT_CLIENTS
            ),
        ]
    healthy: dict[str, float | None] = {}

    def version_killed() -> str:
        did = kill("supervisor", every=True)()
        watch_version_health(target, healthy)
        return did

    scenarios += [
        Scenario("member_killed", steady, kill("member-")),
        Scenario("supervisor_killed", steady, kill("supervisor")),
        # Every supervisor of the canary, while its players log in through the game route.
        Scenario(
            "version_down",
            lambda c: open_loop(
                c, constant_rate(args.rate, args.seconds), lambda i: canary[i % len(canary)]
            ),
            version_killed,
            notes={"version": target.version, "healthy": healthy},
            route="game",
        ),
    ]
    scenarios += version_restarts(args, target, steady)
    for slowdown in SLOWDOWNS:
        busy = neighbours_for(slowdown)
        tag = f"slow_host_{slowdown}x"
        scenarios += [
            Scenario(tag, steady, neighbours=busy),
            *(
                Scenario(
                    f"{tag}_burst_{n}",
                    lambda c, n=n: open_loop(c, burst(n), players),
                    neighbours=busy,
                )
                for n in (200, 1000)
            ),
            Scenario(
                f"{tag}_hot_player_100",
                lambda c: closed_loop(c, 100, min(args.seconds, 20), one_player(hot)),
                notes={"player": hot},
                neighbours=busy,
            ),
        ]
    scenarios.append(
        Scenario(
            "tier_outage_fresh",
            lambda c: open_loop(c, constant_rate(args.rate, args.seconds), known_players),
            store_paused(target),
            notes={"tier_after_fault": True},
        )
    )
    if target.cluster is not None and target.proxy is not None and target.dynalite is not None:
        scenarios += cluster_faults(steady, target.cluster, target.dynalite, target.proxy)
    return scenarios


def version_restarts(
    args: argparse.Namespace, target: Target, steady: Callable[[Caller], Any]
) -> list[Scenario]:
    """Every supervisor of the version killed under logins on its own route
    (`version_down_direct`), and the way back of one, then of all of them (`restart_time`),
    timed where callers see it: HAProxy taking the new replicas."""
    backend = target.backends.get("version", "")
    found: list[HAProxyAdmin] = []

    def admin() -> HAProxyAdmin:
        # Found once for both scenarios, then reused: the admin socket's path (Serve's
        # config) outlives HAProxy's reloads, and finding it (psutil.net_connections reads
        # every process's fds, ~20 ms of this process's CPU with the GIL held on a quiet host)
        # every 50 ms while a replacement was awaited stalled the load's event loop in this
        # same process: its logins were sent in clumps and timed 100-350 ms late, refusals
        # the service had made in 1-3 ms (2026-11-29, docs/runs/reliability.md, AU).
        if not found:
            found.append(HAProxyAdmin.listening_on(target.port))
        return found[0]

    def kill_and_time(every: bool, timings: dict[str, Any], key: str) -> str:
        pids = replica_pids(target.version_app, "supervisor", target.cluster)
        if not pids:
            raise FaultNotApplied(f"no supervisor replica to kill in {target.version_app}")
        before = running_replicas(admin(), backend)
        victims = pids if every else pids[:1]
        killed_at = time.monotonic()
        killed_wall = datetime.now()  # Ray's logs carry the host's local wall clock
        timings.setdefault("_kills", []).append(killed_at)
        for pid in victims:
            psutil.Process(pid).send_signal(signal.SIGKILL)
        timings[key] = seconds_until_replaced(admin, backend, before, killed_at, len(victims))
        # Traced from the logs once the load is over (trace_restarts), not in the run's time.
        timings.setdefault("_traces", []).append((key, killed_wall))
        return f"SIGKILL {len(victims)} of {len(pids)} supervisors (pids {victims})"

    direct: dict[str, Any] = {}
    restarts: dict[str, Any] = {}

    def down() -> str:
        return kill_and_time(True, direct, "replaced_after_s")

    def one_then_all() -> str:
        first = kill_and_time(False, restarts, "one_replaced_after_s")
        second = kill_and_time(True, restarts, "all_replaced_after_s")
        return f"{first}; once replaced, {second}"

    return [
        Scenario("version_down_direct", steady, down, notes={"restarts": direct}),
        Scenario(
            "restart_time",
            lambda c: open_loop(
                c, constant_rate(args.rate, 2 * args.seconds), random_players(args.players)
            ),
            one_then_all,
            notes={"restarts": restarts},
        ),
    ]


def store_paused(target: Target) -> Callable[[], str]:
    """DynamoDB stops answering (SIGSTOP) for STORE_PAUSED_S: on a fresh `make run`, the
    precomputed tier make run built in the background is all there is for known players."""

    def act() -> str:
        if target.dynalite is not None:
            pid: int | None = target.dynalite.pid
        else:
            pid = listening_pid(target.store_port) if target.store_port else None
        if pid is None:
            raise FaultNotApplied(f"nothing listens on the DynamoDB port {target.store_port}")
        pause_for(pid, STORE_PAUSED_S)
        return f"SIGSTOP dynalite pid {pid} for {STORE_PAUSED_S:.0f} s"

    return act


def watch_version_health(target: Target, seen: dict[str, float | None]) -> None:
    """From now (the fault), polls the version's own route (`/healthz`, through the ingress)
    every 100 ms and records in `seen["after_s"]` the seconds until it answers 200 again: the
    moment the version is healthy from a caller's side. None until then, or if it never is
    within the window."""
    import requests

    url = f"http://127.0.0.1:{target.port}{target.routes['version']}/healthz"
    started = time.monotonic()
    seen["after_s"] = None

    def poll() -> None:
        time.sleep(0.5)  # past the kill: the replicas' last answers must not count
        while time.monotonic() - started < HEALTH_WATCH_S:
            try:
                if requests.get(url, timeout=1.0).status_code == 200:
                    seen["after_s"] = round(time.monotonic() - started, 2)
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)

    threading.Thread(target=poll, daemon=True, name="version-health").start()


def tier_share(shots: list[Shot]) -> dict[str, float]:
    """Share of the logins per tier of their answer (online, precomputed, default), and of
    those not answered 200 (`refused`: a 503, no answer or an error): every login counts."""
    if not shots:
        return {}
    tiers = [s.tier if s.status == 200 else "refused" for s in shots]
    return {str(t): round(tiers.count(t) / len(tiers), 4) for t in sorted({str(t) for t in tiers})}


def answered_by(shots: list[Shot]) -> dict[str, int]:
    """200s by the version that answered and why (`own`: the player's assigned version)."""
    counts: dict[str, int] = {}
    for shot in shots:
        if shot.status == 200:
            key = f"{shot.version} ({shot.rerouted_reason or 'own'})"
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def cluster_faults(
    steady: Callable[[Caller], Any],
    cluster: LocalCluster,
    dynalite: Dynalite,
    proxy: DelayProxyProcess,
) -> list[Scenario]:
    """The faults only the run's own cluster can inject: a slow DynamoDB (the delay proxy),
    a dynalite crash (its supervision), the loss of the worker node."""

    def slow_store() -> str:
        proxy.process.send_signal(signal.SIGUSR1)  # type: ignore[union-attr]

        def back() -> None:
            time.sleep(DYNAMO_SLOW_S)
            proxy.process.send_signal(signal.SIGUSR2)  # type: ignore[union-attr]

        threading.Thread(target=back, daemon=True).start()
        return f"+{DYNAMO_DELAY_MS:.0f} ms per DynamoDB call for {DYNAMO_SLOW_S:.0f} s"

    def crash_dynalite() -> str:
        pid = dynalite.pid
        abort_mid_request(dynalite.host, dynalite.port)
        return f"client abort mid-request killed dynalite pid {pid} (supervised restart)"

    lost: dict[str, Any] = {}

    def lose_worker() -> str:
        lost["replicas_on_worker"] = cluster.worker_replicas()
        pids = cluster.kill_worker()
        return f"SIGKILL worker node ({len(pids)} processes, replicas {lost['replicas_on_worker']})"

    return [
        Scenario("dynamodb_slow", steady, slow_store),
        Scenario("dynalite_crash", steady, crash_dynalite, notes={"dynalite": dynalite}),
        Scenario("worker_node_lost", steady, lose_worker, notes={"lost": lost}),
    ]


def edge_reader(target: Target, route: str) -> Callable[[], RefusalsReading | None]:
    """Reads the refusals of the route's backend at the HAProxy on the target's port."""

    def read() -> RefusalsReading | None:
        try:
            return HAProxyAdmin.listening_on(target.port).refusals(target.backends[route])
        except (LookupError, OSError, ValueError, psutil.Error) as exc:
            log(f"refusals at the edge not read: {exc}")
            return None

    return read


def run_scenario(
    scenario: Scenario,
    target: Target,
    budget_ms: float,
    folder: Path,
    client_loop: str = "asyncio",
) -> dict[str, Any]:
    log(f"{scenario.name}: start")
    did: list[str] = []
    applied: list[bool] = []
    base = f"http://127.0.0.1:{target.port}{target.routes[scenario.route]}"

    origin: list[float] = []  # the run's clock: the caller's start, on time.monotonic()

    async def drive() -> list[Shot]:
        caller = Caller(base, target.game)
        origin.append(caller.started)
        load = asyncio.ensure_future(scenario.load(caller))
        if scenario.fault is not None:
            await asyncio.sleep(FAULT_AT_S)
            try:
                did.append(await asyncio.get_running_loop().run_in_executor(None, scenario.fault))
                applied.append(True)
            except FaultNotApplied as exc:
                did.append(f"not applied: {exc}")
                applied.append(False)
            log(f"{scenario.name}: {did[-1]}")
        return list(await load)

    # The delay proxy counts the DynamoDB calls a scenario makes.
    proxy = target.proxy
    counted = proxy is not None and scenario.name.startswith("hot_player")
    reads = proxy.calls() if proxy is not None and counted else None
    edge = edge_reader(target, scenario.route)
    before = edge()
    with cpu_neighbours(scenario.neighbours) as busy:
        if busy:
            log(f"{scenario.name}: {len(busy)} CPU-bound neighbours (pids {busy})")
        shots = run_client(drive(), client_loop)
    after = edge()
    if reads is not None and proxy is not None:
        reads = proxy.calls() - reads
    summary = {"route": target.routes[scenario.route], **summarize(shots)}
    if scenario.neighbours:
        summary["cpu_neighbours"] = scenario.neighbours
    # Who refused at the ingress (loadtest.harness.haproxy_admin.Refusals), null when
    # unreadable or when another HAProxy process answered afterwards (Serve replaced it).
    summary["edge_refusals"] = (
        (after.refusals - before.refusals).as_dict()
        if before is not None and after is not None and before.pid == after.pid
        else None
    )
    accepted = [s for s in shots if s.status is not None and s.status != 503]
    summary["over_budget_plus_100ms"] = sum(
        1 for s in accepted if s.latency_ms > budget_ms + SLACK_MS
    )
    if scenario.fault is not None:
        summary["fault"] = did[0] if did else None
        summary["fault_applied"] = bool(applied and applied[0])
        summary["recovered_after_s"] = recovered_after_s(shots, FAULT_AT_S)
    if reads is not None:
        summary["dynamodb_calls"] = reads
    for key, value in scenario.notes.items():
        if key == "player":
            summary["player"] = value
        elif key == "dynalite":
            summary["dynalite_restarts"] = value.restarts
        elif key == "lost":
            summary["replicas_on_worker"] = value.get("replicas_on_worker")
        elif key == "version":
            summary["back_on_version_after_s"] = back_on_version_after_s(shots, FAULT_AT_S, value)
            summary["answered_by"] = answered_by(shots)
        elif key == "healthy":
            # The target: back on the version within 10 s of it being healthy again.
            summary["healthy_again_after_s"] = value.get("after_s")
            back = summary.get("back_on_version_after_s")
            if back is not None and value.get("after_s") is not None:
                summary["back_after_healthy_s"] = round(back - value["after_s"], 2)
        elif key == "restarts":
            summary.update(timed_from_kills(value, origin[0], shots) if origin else value)
            summary.update(trace_restarts(value, target))
        elif key == "tier_after_fault":
            summary["tier_share_after_fault"] = tier_share(
                [s for s in shots if FAULT_AT_S + 1 <= s.sent_s <= FAULT_AT_S + STORE_PAUSED_S]
            )
        elif key == "offered_per_s":
            sent = [s.sent_s for s in shots]
            summary["offered_per_s"] = value
            summary["sent_per_s"] = (
                round(len(sent) / (max(sent) - min(sent)), 1) if len(sent) > 1 else None
            )
    (folder / "shots" / f"{scenario.name}.json").write_text(
        json.dumps([s.to_json() for s in shots]) + "\n"
    )
    plot(
        shots,
        scenario.name,
        budget_ms + SLACK_MS,
        summary.get("fault"),
        FAULT_AT_S,
        folder / f"{scenario.name}.png",
    )
    log(
        f"{scenario.name}: sent {summary['sent']}, {summary['status_counts']}, "
        f"no answer {summary['no_answer']}, p50/p99/max {summary['client_p50_ms']}/"
        f"{summary['client_p99_ms']}/{summary['client_max_ms']} ms, refusal p99 "
        f"{summary['refusal_p99_ms']} ms, over budget+100 {summary['over_budget_plus_100ms']}, "
        f"fallbacks {summary['fallback_share_by_reason']}, tiers {summary['tier_share']}"
    )
    # Let autoscaling and replaced replicas settle before the next scenario.
    time.sleep(10)
    return summary
