"""`make autoscaling`: the login day against the shipped config with room to grow.

What it measures, on this 2-core host (where more replicas cannot add throughput):
- the scaling decisions: every deployment's target and running replicas, polled from the
  Serve REST API every POLL_S, against offered load and p95 (locust's per-second history);
- that scaling costs no errors: failures and degraded fallbacks over the whole day,
  scale-down included (replicas drain);
- cost: replica-seconds and reserved CPU-seconds of the autoscaled run, against a static
  layout provisioned for the same run's peak (every deployment at the most replicas it
  reached, all day). The ratio is the saving.

The config is serve_config.yaml's first application, as shipped (supervisor and members on
the utilization signal), with these changes, written to the run's folder: DynamoDB is the
run's dynalite; members may grow to MAX_MEMBER_REPLICAS; the supervisor may go down to one
replica, so its own scaling shows (--supervisor-min-replicas 2 keeps it as shipped);
downscale_delay_s is DOWNSCALE_DELAY_S so the night fits in the run. Two local Ray nodes
(harness/cluster.py) give the replicas logical CPUs to land on; they share the same 2 cores.

    .venv/bin/python -m loadtest.autoscaling [--peak-users 60] [--stage-seconds 40]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps, edge_env, from_checkout
from loadtest.autoscaling.report import Sample, analyze, log
from loadtest.harness import serve_status
from loadtest.harness.cluster import LocalCluster
from loadtest.harness.locust_runner import LoadTarget, run_locust
from loadtest.harness.results import Study
from loadtest.harness.systems import dynamo_env
from models.train import ensure_trained

STUDY = Study("loadtest.autoscaling", __doc__, "autoscaling")

TABLE = "player-features-autoscaling"
POLL_S = 2.0
MAX_MEMBER_REPLICAS = 3
DOWNSCALE_DELAY_S = 30.0
NIGHT_TAIL_S = 90  # idle after the last stage: the night goes on, replicas should be at min
PORT = 8000  # HAProxy binds the config's http_options port


def poll_replicas(dashboard: str, app: str) -> dict[str, tuple[int, int]]:
    """deployment -> (target replicas, running replicas), from Serve's REST API."""
    deployments = serve_status.applications(dashboard, timeout_s=5)[app]["deployments"]
    return {
        name: (
            int(d["target_num_replicas"]),
            sum(1 for r in d["replicas"] if r["state"] == "RUNNING"),
        )
        for name, d in deployments.items()
    }


def run_config(
    source: Path,
    folder: Path,
    endpoint: str,
    supervisor_min: int,
    member_target: float | None = None,
) -> tuple[Path, dict[str, Any]]:
    document = yaml.safe_load(source.read_text())
    app = document["applications"][0]
    document["applications"] = [app]
    app["runtime_env"]["env_vars"].update(dynamo_env(endpoint, TABLE))
    from_checkout(app)  # no local model store in this run
    args = app["args"]
    members = args.setdefault("members", {}).setdefault("autoscaling", {})
    members.update({"max_replicas": MAX_MEMBER_REPLICAS, "downscale_delay_s": DOWNSCALE_DELAY_S})
    if member_target is not None:
        members["target_utilization"] = member_target
    supervisor = args.setdefault("supervisor", {}).setdefault("autoscaling", {})
    supervisor.update({"min_replicas": supervisor_min, "downscale_delay_s": DOWNSCALE_DELAY_S})
    path = folder / "serve_config.autoscaling.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, app


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    folder = STUDY.folder("autoscaling")
    ensure_trained(
        app.args.game, app.args.version, app.args.profile, root=get_settings().artifacts_root
    )
    dynalite = Dynalite(free_port(), folder / "dynalite-data", log_path=folder / "dynalite.log")
    samples: list[Sample] = []
    with dynalite:
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, TABLE)
        seed_game(client, TABLE, app.args.game, args.players)
        config, shipped = run_config(
            args.config,
            folder,
            dynalite.endpoint_url,
            args.supervisor_min_replicas,
            args.member_target_utilization,
        )
        log(f"2-node local Ray, deploying {config.name}")
        with LocalCluster(
            folder, head_cpus=args.logical_cpus, node_env=edge_env(config)
        ) as cluster:
            cluster.deploy(config, [shipped["name"]])
            apps = serve_status.applications(cluster.dashboard, timeout_s=5)
            details = apps[shipped["name"]]["deployments"]
            cpus = {
                n: float(d["deployment_config"]["ray_actor_options"]["num_cpus"])
                for n, d in details.items()
            }
            stop = threading.Event()
            started = time.monotonic()
            started_unix = time.time()

            def poll() -> None:
                while not stop.is_set():
                    try:
                        now = time.monotonic() - started
                        for name, (target, running) in poll_replicas(
                            cluster.dashboard, shipped["name"]
                        ).items():
                            samples.append(Sample(round(now, 2), name, target, running))
                    except (requests.RequestException, KeyError, ValueError) as exc:
                        log(f"poll failed: {exc}")
                    stop.wait(POLL_S)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            log(f"login day: peak {args.peak_users} users, {args.stage_seconds}s per stage")
            try:
                result = run_locust(
                    LoadTarget(PORT, shipped["route_prefix"], app.args.game, args.players),
                    folder / "locust",
                    users=args.peak_users,
                    user_rps=1.0,
                    login_day=(args.peak_users, args.stage_seconds),
                    timeout_s=args.stage_seconds * 12 + 300,
                    extra_args=["--csv-full-history"],
                )
                load_s = time.monotonic() - started
                log(f"load done after {load_s:.0f}s; night: {NIGHT_TAIL_S}s idle")
                time.sleep(NIGHT_TAIL_S)
            finally:
                stop.set()
                poller.join(timeout=10)
            duration_s = time.monotonic() - started
    report = {
        "command": args.command,
        "started_at": folder.name,
        "config": str(config.relative_to(PROJECT_ROOT)),
        "logical_cpus": args.logical_cpus + 1,
        "member_target_utilization": args.member_target_utilization,
        "peak_users": args.peak_users,
        "stage_seconds": args.stage_seconds,
        "duration_s": round(duration_s, 1),
        "load": {
            "requests": result.requests,
            "failures": result.failures,
            "p50_ms": result.p50_ms,
            "p95_ms": result.p95_ms,
            "p99_ms": result.p99_ms,
            "outcomes": result.outcomes,
        },
        "cpus": cpus,
        "started_unix": started_unix,
        "samples": [s.__dict__ for s in samples],
    }
    return analyze(folder, report)


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser()
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--peak-users", type=int, default=60)
    parser.add_argument("--stage-seconds", type=int, default=40)
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument(
        "--supervisor-min-replicas",
        type=int,
        default=1,
        help="2: as shipped (no supervisor scale-up at this load); 1: its own scaling shows",
    )
    parser.add_argument(
        "--logical-cpus",
        type=int,
        default=2,
        help="CPUs the head node advertises to Ray's scheduler (the worker adds 1); more "
        "than the host has lets every replica a decision asks for be placed",
    )
    parser.add_argument(
        "--member-target-utilization", type=float, help="instead of the config's, for members"
    )
    parser.add_argument("--analyze", type=Path, help="recompute a finished run's report")
    args = STUDY.parse(parser, argv)
    if args.analyze:
        analyze(args.analyze)
        return 0
    return STUDY.run(lambda: run(args))
