"""Reliability report: the SLA as the caller sees it, under overload, bursts and faults.

    make reliability
    .venv/bin/python -m loadtest.reliability [--rate 30] [--seconds 30] [--only steady,...]

Stages: train the served version; seed dynalite (supervised on a data folder) behind a delay
proxy; start a 2-node Ray cluster on this machine (harness/cluster.py); score the players with
the batch job (the precomputed tier); `serve deploy` the config through the shipped ingress
(Serve's HAProxy); measure the client floor; run each scenario (scenarios.py) with load from
harness/open_loop.py, each login timed at the client. docs/reliability.md has the results.

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
from app.local.serve_config import configured_apps, edge_env
from loadtest.harness.cluster import LocalCluster, cli_env
from loadtest.harness.results import parse_study_args, results_folder, run_study, study_parser
from loadtest.harness.systems import BIN, dynamo_env
from loadtest.reliability.faults import DelayProxyProcess
from loadtest.reliability.report import table
from loadtest.reliability.scenarios import (
    DYNAMO_DELAY_MS,
    DYNAMO_SLOW_S,
    FAULT_AT_S,
    HOT_CLIENTS,
    build_scenarios,
    client_floor,
    log,
    run_scenario,
)
from models.train import ensure_trained

TABLE = "player-features-reliability"


def run(args: argparse.Namespace) -> Path:
    """Every scenario on one cluster, in order; reliability.json after each."""
    app = configured_apps(args.config)[0]
    budget_ms = app.args.request_budget_ms
    folder = results_folder()
    (folder / "shots").mkdir()
    ensure_trained(
        app.args.game, app.args.version, app.args.profile, root=get_settings().artifacts_root
    )
    dynalite = Dynalite(free_port(), folder / "dynalite-data", log_path=folder / "dynalite.log")
    proxy = DelayProxyProcess(
        free_port(), f"127.0.0.1:{dynalite.port}", folder / "delay-proxy.log", DYNAMO_DELAY_MS
    )
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
            "load": "loadtest/harness/open_loop.py (aiohttp, one process on the same host)",
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
            shipped = write_config(args.config, config, proxy.port, folder / "batch")
            log(f"starting a 2-node Ray cluster, deploying {args.config.name}")
            with LocalCluster(folder, node_env=edge_env(config)) as cluster:
                report["batch"] = run_batch(
                    cluster, app, dynalite.endpoint_url, folder / "batch", folder / "batch.log"
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
    print("\n" + table(report) + "\n")
    log(f"report: {folder / 'reliability.json'}")
    return folder


def write_config(base: Path, out: Path, proxy_port: int, batch_root: Path) -> dict[str, Any]:
    """The run's Serve config: `base`'s first application reading DynamoDB through the delay
    proxy, placed for two nodes, loading the batch job's snapshot. Returns that application."""
    document = yaml.safe_load(base.read_text())
    shipped = document["applications"][0]
    document["applications"] = [shipped]
    shipped["runtime_env"]["env_vars"].update(
        dynamo_env(f"http://127.0.0.1:{proxy_port}", TABLE)
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
    shipped["runtime_env"]["env_vars"]["OFFERS_BATCH_OUTPUT_URI"] = str(batch_root)
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return shipped


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
    parser = study_parser("loadtest.reliability", __doc__)
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=30.0, help="steady logins/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each load run")
    parser.add_argument("--only", type=lambda s: set(s.split(",")), default=None)
    args = parse_study_args(parser, argv)
    args.config = args.config.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_study(lambda: run(args), log)

