"""Reliability report: the SLA as the caller sees it, under overload, bursts and faults.

    make reliability
    .venv/bin/python -m loadtest.reliability [--rate 30] [--seconds 30] [--only steady,...]

One cluster for every scenario: a Ray head and a worker node on this machine (loadtest/cluster.py),
serve_config.yaml deployed with `serve deploy` through the shipped ingress (Serve's HAProxy on
its port), dynalite supervised on a data folder, and a delay proxy (loadtest/delay_proxy.py)
between the service and dynalite. Load comes from loadtest/open_loop.py: open-loop arrivals
at a fixed rate or all at once, or closed-loop clients, each login timed at the client.

Scenarios (the fault, if any, acts FAULT_AT_S into the run):
  steady             --rate logins/s
  overload_2x        2 x --rate for --seconds
  burst_200/500      that many logins at once
  hot_player         50 closed-loop clients on one player; DynamoDB calls counted
  member_killed      a member replica SIGKILLed
  supervisor_killed  a supervisor replica SIGKILLed
  dynamodb_slow      +800 ms on every DynamoDB call for DYNAMO_SLOW_S, then normal again
  dynalite_crash     a client aborts mid-request, which kills dynalite 4.0.0; the runner's
                     supervision restarts it with its data
  worker_node_lost   the worker node (raylet and all its processes) SIGKILLed; last

Writes loadtest/results/<timestamp>/reliability.json, every login (shots/<scenario>.json) and
a plot per scenario (client latency over time, the fault marked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps
from loadtest.cluster import LocalCluster, cli_env
from loadtest.open_loop import (
    Caller,
    Shot,
    burst,
    closed_loop,
    constant_rate,
    one_player,
    open_loop,
    percentile,
    random_players,
    summarize,
)
from loadtest.systems import BIN, ManagedProcess, dynamo_env, run_interruptible
from models.population import player_id
from models.train import ensure_trained

RESULTS = PROJECT_ROOT / "loadtest" / "results"
TABLE = "player-features-reliability"
FAULT_AT_S = 8.0
DYNAMO_SLOW_S = 12.0
DYNAMO_DELAY_MS = 800.0
SLACK_MS = 100.0  # the target: every accepted answer within budget + 100 ms
HOT_CLIENTS = 50


def log(message: str) -> None:
    print(f"[reliability {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Scenario:
    name: str
    load: Callable[[Caller], Any]  # returns the coroutine producing the shots
    fault: Callable[[], str] | None = None  # acts, returns what it did
    notes: dict[str, Any] = field(default_factory=dict)


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


def plot(shots: list[Shot], name: str, budget_ms: float, fault: str | None, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {
        "200 personalized": ([], [], "tab:green", "."),
        "200 fallback": ([], [], "tab:orange", "."),
        "503 refused": ([], [], "tab:blue", "."),
        "other 5xx": ([], [], "tab:red", "x"),
        "no answer": ([], [], "black", "x"),
    }
    for s in shots:
        if s.status is None:
            key = "no answer"
        elif s.status == 503:
            key = "503 refused"
        elif s.status >= 500:
            key = "other 5xx"
        elif s.personalized:
            key = "200 personalized"
        else:
            key = "200 fallback"
        groups[key][0].append(s.sent_s)
        groups[key][1].append(s.latency_ms)
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, (xs, ys, color, marker) in groups.items():
        if xs:
            ax.scatter(xs, ys, s=6, c=color, marker=marker, label=f"{label} ({len(xs)})")
    ax.axhline(budget_ms + SLACK_MS, color="grey", ls="--", lw=1, label="budget + 100 ms")
    if fault:
        ax.axvline(FAULT_AT_S, color="red", lw=1)
        label = fault if len(fault) <= 70 else fault[:67] + "..."
        ax.text(FAULT_AT_S, ax.get_ylim()[1] * 0.95, f" {label}", color="red", fontsize=8, va="top")
    ax.set_xlabel("seconds since the start of the scenario (send time)")
    ax.set_ylabel("client latency (ms)")
    ax.set_title(name)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


class DelayProxyProcess(ManagedProcess):
    def __init__(self, listen_port: int, target: str, log_path: Path) -> None:
        super().__init__(
            [
                str(BIN / "python"),
                "-m",
                "loadtest.delay_proxy",
                "--listen",
                f"127.0.0.1:{listen_port}",
                "--target",
                target,
                "--delay-ms",
                str(DYNAMO_DELAY_MS),
            ],
            {"PATH": str(BIN), "PYTHONPATH": str(PROJECT_ROOT)},
            log_path,
        )
        self.port = listen_port

    def calls(self) -> int:
        self.process.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        time.sleep(0.3)
        counts = re.findall(r"calls (\d+)", self.log_path.read_text())
        return int(counts[-1]) if counts else 0

    def wait_listening(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"delay proxy not listening on {self.port}")


def abort_mid_request(host: str, port: int) -> None:
    """What a client that dies mid-request does to dynalite: half a body, then a reset."""
    sock = socket.create_connection((host, port))
    sock.sendall(
        b"POST / HTTP/1.1\r\nHost: dynalite\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b'X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{"Lim'
    )
    time.sleep(0.2)
    sock.close()


def replica_pids(cluster: LocalCluster, deployment: str) -> list[int]:
    pids = []
    for node in (cluster.head, cluster.worker):
        if node is None:
            continue
        for proc in node.tree():
            try:
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if "ServeReplica:" in title and f":{deployment}" in title:
                pids.append(proc.pid)
    return pids


def client_floor(port: int, n: int) -> float | None:
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

    return percentile(asyncio.run(run()), 99)


def run_batch(
    cluster: LocalCluster, app: Any, endpoint_url: str, root: Path, log_path: Path
) -> dict[str, Any]:
    """`python -m app.batch` for the served version, on the cluster, into `root`."""
    env = {
        **cli_env(),
        **dynamo_env(endpoint_url, TABLE),
        "OFFERS_BATCH_OUTPUT_URI": str(root),
        "RAY_ADDRESS": f"127.0.0.1:{cluster.gcs_port}",
    }
    command = [
        str(BIN / "python"),
        "-m",
        "app.batch",
        *("--game", app.args.game, "--version", app.args.version, "--profile", app.args.profile),
        *("--actors", "1", "--actor-num-cpus", "0.5"),
    ]
    started = time.monotonic()
    with log_path.open("w") as out:
        done = subprocess.run(
            command, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900
        )
    lines = log_path.read_text().strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("output: "):
        raise RuntimeError(f"batch job failed (exit {done.returncode}), see {log_path}")
    return {
        "output": lines[-1].removeprefix("output: "),
        "summary": lines[-2],
        "seconds": round(time.monotonic() - started, 1),
    }


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    budget_ms = app.args.request_budget_ms
    folder = RESULTS / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (folder / "shots").mkdir(parents=True)
    ensure_trained(
        app.args.game, app.args.version, app.args.profile, root=get_settings().artifacts_root
    )
    dynalite = Dynalite(free_port(), folder / "dynalite-data", log_path=folder / "dynalite.log")
    proxy = DelayProxyProcess(free_port(), f"127.0.0.1:{dynalite.port}", folder / "delay-proxy.log")
    report: dict[str, Any] = {
        "command": args.command,
        "started_at": folder.name,
        "budget_ms": budget_ms,
        "settings": {
            "rate_rps": args.rate,
            "seconds": args.seconds,
            "fault_at_s": FAULT_AT_S,
            "dynamodb_delay_ms": DYNAMO_DELAY_MS,
            "dynamodb_slow_s": DYNAMO_SLOW_S,
            "hot_player_clients": HOT_CLIENTS,
            "config": str(args.config.relative_to(PROJECT_ROOT)),
            "config_changes": "DynamoDB endpoint -> the delay proxy; supervisor and members: "
            "autoscaling.min_replicas 2, max_replicas_per_node 1",
            "ingress": "Serve's HAProxy ingress (RAY_SERVE_ENABLE_HA_PROXY=1)",
            "load": "loadtest/open_loop.py (aiohttp, one process on the same host)",
        },
        "scenarios": {},
    }
    with dynalite:
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, TABLE)
        seed_game(client, TABLE, app.args.game, args.players)
        dynalite.supervise()
        proxy.start()
        try:
            proxy.wait_listening()
            port = 8000  # HAProxy binds the config's http_options port
            config = folder / "serve_config.reliability.yaml"
            document = yaml.safe_load(args.config.read_text())
            shipped = document["applications"][0]
            document["applications"] = [shipped]
            shipped["runtime_env"]["env_vars"].update(
                dynamo_env(f"http://127.0.0.1:{proxy.port}", TABLE)
            )
            # A multi-node cluster, placed as production should be: every deployment has a
            # replica on each node (min 2, at most 1 per node), so the lost node takes one
            # replica of each, never all (SPREAD alone is a preference: runs here put both
            # supervisors, or every member group, on the node that was then lost).
            for role in ("supervisor", "members"):
                sizing = shipped["args"].setdefault(role, {})
                sizing["max_replicas_per_node"] = 1
                sizing.setdefault("autoscaling", {})["min_replicas"] = 2
            # The precomputed tier: the batch job scores the seeded players on this cluster
            # before the service starts, and the supervisors load its snapshot, so the
            # DynamoDB fault scenarios show which answers it saved from the default offer.
            batch_root = folder / "batch"
            shipped["runtime_env"]["env_vars"]["OFFERS_BATCH_OUTPUT_URI"] = str(batch_root)
            config.write_text(yaml.safe_dump(document, sort_keys=False))
            log(f"starting a 2-node Ray cluster, deploying {args.config.name}")
            with LocalCluster(folder) as cluster:
                report["batch"] = run_batch(
                    cluster, app, dynalite.endpoint_url, batch_root, folder / "batch.log"
                )
                log(f"batch run: {report['batch']}")
                cluster.deploy(config, [shipped["name"]])
                base = f"http://127.0.0.1:{port}{shipped['route_prefix']}"
                report["client_floor_p99_ms"] = {
                    "burst_200": client_floor(port, 200),
                    "burst_500": client_floor(port, 500),
                }
                log(f"client floor (HAProxy /-/healthz): {report['client_floor_p99_ms']}")
                scenarios = build_scenarios(args, cluster, dynalite, proxy)
                for scenario in scenarios:
                    if args.only and scenario.name not in args.only:
                        continue
                    report["scenarios"][scenario.name] = run_scenario(
                        scenario, base, app.args.game, budget_ms, folder, proxy
                    )
                    (folder / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")
        finally:
            proxy.stop(grace_s=5)
    (folder / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(report))
    print()
    log(f"report: {folder / 'reliability.json'}")
    return folder


def build_scenarios(
    args: argparse.Namespace, cluster: LocalCluster, dynalite: Dynalite, proxy: DelayProxyProcess
) -> list[Scenario]:
    players = random_players(args.players)
    steady = lambda caller: open_loop(caller, constant_rate(args.rate, args.seconds), players)  # noqa: E731
    hot = player_id(7)

    def kill_one(deployment: str) -> Callable[[], str]:
        def act() -> str:
            pids = replica_pids(cluster, deployment)
            if not pids:
                return f"no {deployment} replica found"
            psutil.Process(pids[0]).send_signal(signal.SIGKILL)
            return f"SIGKILL {deployment} replica pid {pids[0]} (of {len(pids)})"

        return act

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
        Scenario("steady", steady),
        Scenario(
            "overload_2x",
            lambda c: open_loop(c, constant_rate(2 * args.rate, args.seconds), players),
        ),
        Scenario("burst_200", lambda c: open_loop(c, burst(200), players)),
        Scenario("burst_500", lambda c: open_loop(c, burst(500), players)),
        Scenario(
            "hot_player",
            lambda c: closed_loop(c, HOT_CLIENTS, min(args.seconds, 20), one_player(hot)),
            notes={"player": hot},
        ),
        Scenario("member_killed", steady, kill_one("member-")),
        Scenario("supervisor_killed", steady, kill_one("supervisor")),
        Scenario("dynamodb_slow", steady, slow_store),
        Scenario("dynalite_crash", steady, crash_dynalite, notes={"dynalite": dynalite}),
        Scenario("worker_node_lost", steady, lose_worker, notes={"lost": lost}),
    ]


def run_scenario(
    scenario: Scenario,
    base: str,
    game: str,
    budget_ms: float,
    folder: Path,
    proxy: DelayProxyProcess,
) -> dict[str, Any]:
    log(f"{scenario.name}: start")
    did: list[str] = []

    async def drive() -> list[Shot]:
        caller = Caller(base, game)
        load = asyncio.ensure_future(scenario.load(caller))
        if scenario.fault is not None:
            await asyncio.sleep(FAULT_AT_S)
            did.append(await asyncio.get_running_loop().run_in_executor(None, scenario.fault))
            log(f"{scenario.name}: {did[-1]}")
        return list(await load)

    # The delay proxy counts the DynamoDB calls a scenario makes.
    reads = proxy.calls() if scenario.name == "hot_player" else None
    shots = asyncio.run(drive())
    if reads is not None:
        reads = proxy.calls() - reads
    summary = summarize(shots)
    accepted = [s for s in shots if s.status is not None and s.status != 503]
    summary["over_budget_plus_100ms"] = sum(
        1 for s in accepted if s.latency_ms > budget_ms + SLACK_MS
    )
    if scenario.fault is not None:
        summary["fault"] = did[0] if did else None
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
    (folder / "shots" / f"{scenario.name}.json").write_text(
        json.dumps([s.to_json() for s in shots]) + "\n"
    )
    plot(shots, scenario.name, budget_ms, summary.get("fault"), folder / f"{scenario.name}.png")
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


def table(report: dict[str, Any]) -> str:
    lines = [
        "| scenario | sent | status counts | 5xx (not 503) | no answer | p50 / p99 / max (ms) "
        "| refusal p99 (ms) | > budget+100 | fallback share | precomputed / default "
        "| recovered (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["scenarios"].items():
        counts = ", ".join(f"{k}: {v}" for k, v in s["status_counts"].items())
        shares = ", ".join(f"{k} {v:.3f}" for k, v in s["fallback_share_by_reason"].items())
        tiers = s.get("tier_share", {})
        tier = f"{tiers.get('precomputed', 0):.3f} / {tiers.get('default', 0):.3f}"
        lines.append(
            f"| {name} | {s['sent']} | {counts} | {s['http_5xx_non503']} | {s['no_answer']} "
            f"| {s['client_p50_ms']} / {s['client_p99_ms']} / {s['client_max_ms']} "
            f"| {s['refusal_p99_ms'] if s['refusal_p99_ms'] is not None else '-'} "
            f"| {s['over_budget_plus_100ms']} | {shares or '-'} | {tier} "
            f"| {s.get('recovered_after_s', '-')} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest.reliability", description=__doc__)
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=30.0, help="steady logins/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each load run")
    parser.add_argument("--only", type=lambda s: set(s.split(",")), default=None)
    args = parser.parse_args(argv)
    args.config = args.config.resolve()
    args.command = shlex.join(["python", "-m", "loadtest.reliability", *(argv or sys.argv[1:])])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_interruptible(lambda: run(args), log)


if __name__ == "__main__":
    sys.exit(main())
