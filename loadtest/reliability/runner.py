"""Reliability report: the SLA as the caller sees it, under overload, bursts and faults.

    make reliability
    .venv/bin/python -m loadtest.reliability [--rate 30] [--seconds 30] [--only steady,...]
    .venv/bin/python -m loadtest.reliability --target local   # against a running `make run`

Stages: train the served versions; seed dynalite (supervised on a data folder) behind a delay
proxy; start a 2-node Ray cluster on this machine (harness/cluster.py); score the players with
the batch job (the precomputed tier); `serve deploy` the whole config through the shipped
ingress (Serve's HAProxy with the edge's admission); measure the client floor; run each
scenario (scenarios.py) with load from harness/open_loop.py, each login timed at the client.
`--target local` runs the same scenarios, without the delay proxy, dynalite and node faults,
against `make run`. docs/reliability.md has the results.

Scenarios (the fault, if any, acts FAULT_AT_S into the run); `_game` ones go through the
game's router, the others through the first version's own route:
  steady[_game]           --rate logins/s
  overload_2x[_game]      2 x --held-rate (what the bench held) for --seconds
  burst_N[_game]          N = 200, 500, 1000 logins at once
  hot_player_K[_game]     K = 50, 100 closed-loop clients on one player
  member_killed           a member replica SIGKILLed
  supervisor_killed       a supervisor replica SIGKILLed
  version_down            every supervisor of the first version SIGKILLed while its players
                          log in through the game route; records when its own route is
                          healthy again and when its players are back on it
  version_down_direct     the same kill with the logins on the version's own route: each
                          must be a fast 503 (or a flagged fallback) until it serves again;
                          records when HAProxy had the replaced replicas up
  restart_time            one supervisor SIGKILLed, and once HAProxy has its replacement
                          up, every one of them: the seconds to each way back
                          (both restart scenarios split each way back into its steps from
                          the Ray session's logs: startup_trace.py)
  slow_host_Nx[_burst_200|_burst_1000|_hot_player_100]
                          N = 2, 3: steady load, bursts and a hot player with (N - 1) x cores
                          CPU-bound neighbour processes on the host (harness: host_faults)
  tier_outage_fresh       DynamoDB paused (SIGSTOP) for STORE_PAUSED_S under logins of seeded
                          players: on a fresh `make run`, the tier share while it is out
  dynamodb_slow           +800 ms on every DynamoDB call for DYNAMO_SLOW_S (cluster only)
  dynalite_crash          a client aborts mid-request, which kills dynalite 4.0.0; its
                          supervision restarts it with its data (cluster only)
  worker_node_lost        the worker node (raylet and all its processes) SIGKILLed; last
                          (cluster only)

Writes loadtest/results/<timestamp>/reliability.json, every login (shots/<scenario>.json) and
a plot per scenario (client latency over time, the fault marked).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import (
    BUILDER_IMPORT_PATH,
    configured_apps,
    edge_env,
    from_checkout,
)
from loadtest.harness.cluster import LocalCluster, cli_env
from loadtest.harness.open_loop import CLIENT_LOOPS
from loadtest.harness.results import Study
from loadtest.harness.systems import BIN, dynamo_env
from loadtest.reliability.faults import DelayProxyProcess
from loadtest.reliability.report import startup_rows, table, target_rows
from loadtest.reliability.scenarios import (
    DYNAMO_DELAY_MS,
    DYNAMO_SLOW_S,
    FAULT_AT_S,
    HOT_CLIENTS,
    build_scenarios,
    client_floors,
    log,
    run_scenario,
)
from loadtest.reliability.targets import PORT, Target, local_target, make_target
from models.train import ensure_trained

STUDY = Study("loadtest.reliability", __doc__, "reliability")

TABLE = "player-features-reliability"


def run(args: argparse.Namespace) -> Path:
    """Every scenario, in order, on the run's own cluster or on `make run`; the report after
    each."""
    apps = configured_apps(args.config)
    app = apps[0]
    local = local_target(args, app) if args.target == "local" else None  # checked first
    folder = STUDY.folder("local" if local else "")
    (folder / "shots").mkdir()
    report = new_report(args, app.args.request_budget_ms)
    if local:
        run_scenarios(args, local, report, folder)
    else:
        for each in apps:
            ensure_trained(
                each.args.game, each.args.version, each.args.profile,
                root=get_settings().artifacts_root,
            )  # fmt: skip
        with_cluster(args, app, report, folder)
    (folder / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")
    print("\n" + table(report) + "\n")
    print(target_rows(report) + "\n")
    if steps := startup_rows(report):
        print("Where the way back went (median s per step, startup_trace):\n" + steps + "\n")
    log(f"report: {folder / 'reliability.json'}")
    return folder


def with_cluster(args: argparse.Namespace, app: Any, report: dict[str, Any], folder: Path) -> None:
    """dynalite behind the delay proxy, a 2-node cluster, the batch job, the whole config."""
    dynalite = Dynalite(free_port(), folder / "dynalite-data", log_path=folder / "dynalite.log")
    proxy = DelayProxyProcess(
        free_port(), f"127.0.0.1:{dynalite.port}", folder / "delay-proxy.log", DYNAMO_DELAY_MS
    )
    with dynalite:
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, TABLE)
        seed_game(client, TABLE, app.args.game, args.players)
        dynalite.supervise()
        proxy.start()
        try:
            proxy.wait_listening()
            config = folder / "serve_config.reliability.yaml"
            names = write_config(args.config, config, proxy.port, folder / "batch")
            log(f"starting a 2-node Ray cluster, deploying {args.config.name}")
            # Both nodes are this host's processes; the worker gets the head's CPU count,
            # so one replica of every deployment of the whole config fits on each.
            with LocalCluster(folder, worker_cpus=2, node_env=edge_env(config)) as cluster:
                report["batch"] = run_batch(
                    cluster, app, dynalite.endpoint_url, folder / "batch", folder / "batch.log"
                )
                log(f"batch run: {report['batch']}")
                cluster.deploy(config, names)
                target = make_target(args, app, cluster=cluster, dynalite=dynalite, proxy=proxy)
                run_scenarios(args, target, report, folder)
        finally:
            proxy.stop(grace_s=5)


def run_scenarios(
    args: argparse.Namespace, target: Target, report: dict[str, Any], folder: Path
) -> None:
    floors = client_floors(PORT, args.client_loop)
    report["client_floor_p99_ms"] = floors.pop("host")
    report["client_floor_p99_ms_slow_host"] = floors
    log(f"client floor (HAProxy /-/healthz): {report['client_floor_p99_ms']}")
    for scenario in build_scenarios(args, target):
        if args.only and scenario.name not in args.only:
            continue
        report["scenarios"][scenario.name] = run_scenario(
            scenario, target, report["budget_ms"], folder, args.client_loop
        )
        (folder / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")


def new_report(args: argparse.Namespace, budget_ms: float) -> dict[str, Any]:
    local = args.target == "local"
    return {
        "command": args.command,
        "target": args.target,
        "budget_ms": budget_ms,
        "settings": {
            "rate_rps": args.rate,
            "seconds": args.seconds,
            "fault_at_s": FAULT_AT_S,
            "dynamodb_delay_ms": DYNAMO_DELAY_MS,
            "dynamodb_slow_s": DYNAMO_SLOW_S,
            "hot_player_clients": HOT_CLIENTS,
            "config": str(args.config.relative_to(PROJECT_ROOT)),
            "config_changes": "none: the running `make run`"
            if local
            else "DynamoDB endpoint -> the delay proxy; every ensemble app's supervisor and "
            "members: autoscaling.min_replicas 2, max_replicas 2, max_replicas_per_node 1",
            "ingress": "Serve's HAProxy ingress with the edge's admission (app.edge)",
            "load": "loadtest/harness/open_loop.py (aiohttp on "
            f"{args.client_loop}, one process on the same host)",
        },
        "scenarios": {},
    }


# The cluster's nodes (head and one worker).
NODES = 2


def write_config(base: Path, out: Path, proxy_port: int, batch_root: Path) -> list[str]:
    """The run's Serve config: every application of `base`, the ensembles reading DynamoDB
    through the delay proxy, placed for two nodes, loading the batch job's snapshots.
    Returns the applications' names."""
    document = yaml.safe_load(base.read_text())
    for app in document["applications"]:
        if app.get("import_path") != BUILDER_IMPORT_PATH:
            continue
        env = app.setdefault("runtime_env", {}).setdefault("env_vars", {})
        env.update(dynamo_env(f"http://127.0.0.1:{proxy_port}", TABLE))
        from_checkout(app)  # no local model store on this cluster's nodes
        # A multi-node cluster, placed as production should be: every deployment has a
        # replica on each node (min 2, at most 1 per node), so the lost node takes one
        # replica of each, never all (SPREAD alone is a preference: runs here put both
        # supervisors, or every member group, on the node that was then lost).
        # And at most one replica per node: a target of 3 cannot be placed on 2 nodes, and
        # Serve keeps the application UNHEALTHY for as long as such a target stands.
        for role in ("supervisor", "members"):
            sizing = app["args"].setdefault(role, {})
            sizing["max_replicas_per_node"] = 1
            scaling = sizing.setdefault("autoscaling", {})
            scaling["min_replicas"] = NODES
            scaling["max_replicas"] = NODES
        # The precomputed tier: the batch job scores the seeded players on this cluster
        # before the service starts (the first version's), and the supervisors load its
        # snapshot, so the DynamoDB fault scenarios show which answers it saved.
        env["OFFERS_BATCH_OUTPUT_URI"] = str(batch_root)
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return [a["name"] for a in document["applications"]]


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = STUDY.parser()
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=30.0, help="steady logins/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each load run")
    parser.add_argument(
        "--held-rate",
        type=float,
        default=213.0,
        help="logins/s the bench held with the shipped config on this host (overload_2x "
        "sends twice it); 213 is the 2026-11-25 figure of docs/performance.md",
    )
    parser.add_argument("--only", type=lambda s: set(s.split(",")), default=None)
    parser.add_argument(
        "--client-loop",
        choices=CLIENT_LOOPS,
        default="asyncio",
        help="the load client's event loop (the client floor is measured on the same one)",
    )
    parser.add_argument(
        "--target",
        choices=("cluster", "local"),
        default="cluster",
        help="cluster: a 2-node cluster of its own (every fault); local: a running `make run` "
        "(no delay proxy, dynalite or node faults)",
    )
    args = STUDY.parse(parser, argv)
    args.config = args.config.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return STUDY.run(lambda: run(args))
