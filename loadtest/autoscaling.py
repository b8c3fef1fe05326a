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
(loadtest.cluster) give the replicas logical CPUs to land on; they share the same 2 cores.

    .venv/bin/python -m loadtest.autoscaling [--peak-users 60] [--stage-seconds 40]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import yaml

from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.ray_auth import auth_header
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps
from loadtest.cluster import LocalCluster
from loadtest.locust_runner import LoadTarget, run_locust
from loadtest.systems import dynamo_env
from models.train import ensure_trained

RESULTS = PROJECT_ROOT / "loadtest" / "results"
TABLE = "player-features-autoscaling"
POLL_S = 2.0
MAX_MEMBER_REPLICAS = 3
DOWNSCALE_DELAY_S = 30.0
NIGHT_TAIL_S = 90  # idle after the last stage: the night goes on, replicas should be at min
PORT = 8000  # HAProxy binds the config's http_options port


def log(message: str) -> None:
    print(f"[autoscaling {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the load started
    deployment: str
    target: int
    running: int


def poll_replicas(dashboard: str, app: str) -> dict[str, tuple[int, int]]:
    """deployment -> (target replicas, running replicas), from Serve's REST API."""
    body = requests.get(
        f"{dashboard}/api/serve/applications/", headers=auth_header(), timeout=5
    ).json()
    deployments = body["applications"][app]["deployments"]
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


def cost(samples: list[Sample], cpus: dict[str, float], duration_s: float) -> dict[str, Any]:
    """Replica-seconds and reserved CPU-seconds, autoscaled (running replicas integrated
    over time) and static (each deployment at its peak running count all day)."""
    by_deployment: dict[str, list[Sample]] = {}
    for s in samples:
        by_deployment.setdefault(s.deployment, []).append(s)
    out: dict[str, Any] = {"deployments": {}}
    totals = {"replica_s": 0.0, "static_replica_s": 0.0, "cpu_s": 0.0, "static_cpu_s": 0.0}
    for name, series in sorted(by_deployment.items()):
        series.sort(key=lambda s: s.t)
        area = sum(
            a.running * (b.t - a.t) for a, b in zip(series, series[1:], strict=False)
        ) + series[-1].running * max(0.0, duration_s - series[-1].t)
        area += series[0].running * series[0].t  # before the first poll
        peak = max(s.running for s in series)
        row = {
            "min_running": min(s.running for s in series),
            "peak_running": peak,
            "peak_target": max(s.target for s in series),
            "replica_s": round(area, 1),
            "static_replica_s": round(peak * duration_s, 1),
            "num_cpus": cpus[name],
        }
        out["deployments"][name] = row
        totals["replica_s"] += area
        totals["static_replica_s"] += peak * duration_s
        totals["cpu_s"] += area * cpus[name]
        totals["static_cpu_s"] += peak * duration_s * cpus[name]
    out["totals"] = {k: round(v, 1) for k, v in totals.items()}
    out["ratio_replica_s"] = round(totals["replica_s"] / totals["static_replica_s"], 3)
    out["ratio_cpu_s"] = round(totals["cpu_s"] / totals["static_cpu_s"], 3)
    return out


def load_history(path: Path, started_unix: float) -> list[dict[str, float]]:
    """Locust's per-second aggregate: users, requests/s and p95, on the run's clock."""
    rows = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if row["Name"] != "Aggregated":
                continue
            p95 = row.get("95%", "N/A")
            rows.append(
                {
                    "t": float(row["Timestamp"]) - started_unix,
                    "users": float(row["User Count"]),
                    "rps": float(row["Requests/s"]),
                    "p95_ms": float(p95) if p95 not in ("N/A", "") else float("nan"),
                    "requests": float(row["Total Request Count"]),
                    "failures": float(row["Total Failure Count"]),
                }
            )
    return rows


def phase_at(samples: list[Sample], t: float) -> str:
    """`scaling up` while any deployment has replicas starting (target above running),
    `scaling down` while any drains (target below running), else `steady`; from the latest
    poll at or before t."""
    latest: dict[str, Sample] = {}
    for s in samples:
        if s.t <= t:
            latest[s.deployment] = s
    if any(s.target > s.running for s in latest.values()):
        return "scaling up"
    if any(s.target < s.running for s in latest.values()):
        return "scaling down"
    return "steady"


def phases(samples: list[Sample], history: list[dict[str, float]]) -> dict[str, Any]:
    """Requests, failures and the worst 10-second p95 while scaling up, down and steady."""
    out: dict[str, dict[str, float]] = {}
    ordered = sorted(history, key=lambda h: h["t"])
    for before, row in zip(ordered, ordered[1:], strict=False):
        phase = out.setdefault(
            phase_at(samples, row["t"]),
            {"seconds": 0, "requests": 0, "failures": 0, "worst_p95_ms": 0.0},
        )
        phase["seconds"] += 1
        phase["requests"] += row["requests"] - before["requests"]
        phase["failures"] += row["failures"] - before["failures"]
        if row["p95_ms"] == row["p95_ms"]:  # not NaN
            phase["worst_p95_ms"] = max(phase["worst_p95_ms"], row["p95_ms"])
    return out


def plot(samples: list[Sample], history: list[dict[str, float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for name in sorted({s.deployment for s in samples}):
        series = sorted((s for s in samples if s.deployment == name), key=lambda s: s.t)
        top.step([s.t for s in series], [s.running for s in series], where="post", label=name)
    top.set_ylabel("running replicas")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    bottom.plot([h["t"] for h in history], [h["rps"] for h in history], label="logins/s")
    bottom.set_ylabel("offered logins/s")
    bottom.set_xlabel("seconds since the load started")
    twin = bottom.twinx()
    twin.plot([h["t"] for h in history], [h["p95_ms"] for h in history], "r.", ms=3, label="p95")
    twin.set_ylabel("p95 ms (locust, last 10 s)", color="r")
    bottom.grid(alpha=0.3)
    fig.suptitle("Login day: replicas per deployment against load")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    folder = RESULTS / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-autoscaling")
    folder.mkdir(parents=True)
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
        with LocalCluster(folder, head_cpus=args.logical_cpus) as cluster:
            cluster.deploy(config, [shipped["name"]])
            details = requests.get(
                f"{cluster.dashboard}/api/serve/applications/", headers=auth_header(), timeout=5
            ).json()["applications"][shipped["name"]]["deployments"]
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
        "command": " ".join(sys.argv),
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


def analyze(folder: Path, report: dict[str, Any] | None = None) -> Path:
    """Cost, phases and plot from a run's samples and locust history (again: --analyze)."""
    path = folder / "autoscaling.json"
    report = report or json.loads(path.read_text())
    samples = [Sample(**s) for s in report["samples"]]
    history = load_history(folder / "locust" / "locust_stats_history.csv", report["started_unix"])
    report["cost"] = cost(samples, report["cpus"], report["duration_s"])
    report["phases"] = phases(samples, history)
    path.write_text(json.dumps(report, indent=2) + "\n")
    plot(samples, history, folder / "replicas.png")
    log(json.dumps({k: report[k] for k in ("duration_s", "load", "cost", "phases")}, indent=2))
    log(f"report: {path}, plot: {folder / 'replicas.png'}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    args = parser.parse_args(argv)
    if args.analyze:
        analyze(args.analyze)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
