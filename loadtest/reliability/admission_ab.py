"""The adaptive admission against the fixed one, interleaved, on a running `make run`.

    .venv/bin/python -m loadtest.reliability.admission_ab [--rounds 3]
        [--only slow_host_3x_burst_1000,slow_host_3x_hot_player_100,...]

Each round deploys the config twice with `serve deploy` (every ensemble application's
`admission.adaptive` true, then false, the order alternating by round) and runs the same
reliability scenarios against each (loadtest/reliability/scenarios.py, the host made slower
by CPU-bound neighbours where the scenario says so). The edge is the same in both: without
the replicas' reported room HAProxy's static cap is the only one. Writes
loadtest/results/<timestamp>-admission-ab/admission_ab.json: per scenario and mode, the
median and min-max over the rounds of the refusal p99, the client p99, the logins over
budget + 100 ms and the share refused, and the client floor of each round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from app.local.processes import PROJECT_ROOT
from app.local.ray_auth import ray_auth_env
from app.local.serve_config import BUILDER_IMPORT_PATH, configured_apps
from loadtest.harness.results import results_folder, spread, study_log
from loadtest.reliability.scenarios import build_scenarios, client_floors, run_scenario
from loadtest.reliability.targets import PORT, local_target

DASHBOARD = "http://127.0.0.1:8265"
MODES = ("adaptive", "fixed")
DEFAULT_ONLY = "slow_host_3x_burst_1000,slow_host_3x_hot_player_100,slow_host_2x_burst_1000"

log = study_log("admission-ab")


def with_admission(base: Path, out: Path, adaptive: bool) -> Path:
    document = yaml.safe_load(base.read_text())
    for app in document["applications"]:
        if app.get("import_path") == BUILDER_IMPORT_PATH:
            args = app.setdefault("args", {})
            args["admission"] = {**(args.get("admission") or {}), "adaptive": adaptive}
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return out


def deploy(config: Path, routes: list[str]) -> None:
    """`serve deploy`, then wait until every ensemble route answers a login."""
    subprocess.run(
        [str(Path(PROJECT_ROOT) / ".venv/bin/serve"), "deploy", str(config), "--address",
         DASHBOARD],
        check=True, capture_output=True, text=True, timeout=120,
        env={**os.environ, **ray_auth_env()},  # make run's cluster takes the project's token
    )  # fmt: skip
    time.sleep(5)  # Serve starts replacing the replicas
    deadline = time.monotonic() + 180
    body = {"player_id": "p0000001", "game": "galaxy-raiders"}
    while time.monotonic() < deadline:
        try:
            if all(
                requests.post(f"http://127.0.0.1:{PORT}{r}/v1/offers", json=body, timeout=5)
                .json()
                .get("personalized")
                for r in routes
            ):
                time.sleep(10)  # the old replicas drained, the new ones warm
                return
        except (requests.RequestException, ValueError):
            pass
        time.sleep(1)
    raise TimeoutError(f"{config} did not serve within 180 s")


def run(args: argparse.Namespace) -> Path:
    apps = configured_apps(args.config)  # the ensemble applications
    routes = [a.route_prefix for a in apps]
    target = local_target(args, apps[0])  # checked before a results folder is made
    folder = results_folder("admission-ab")
    (folder / "shots").mkdir()
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    floors = []
    try:
        for round_ in range(args.rounds):
            order = MODES if round_ % 2 == 0 else MODES[::-1]
            for mode in order:
                config = with_admission(args.config, folder / f"{mode}.yaml", mode == "adaptive")
                log(f"round {round_ + 1}: {mode}")
                deploy(config, routes)
                floors.append(client_floors(PORT))
                for scenario in build_scenarios(args, target):
                    if scenario.name not in args.only:
                        continue
                    summary = run_scenario(scenario, target, args.budget_ms, folder)
                    rows.setdefault(scenario.name, {}).setdefault(mode, []).append(summary)
    finally:
        log("restoring the shipped config")
        deploy(args.config, routes)
    report = {
        "command": args.command,
        "rounds": args.rounds,
        "client_floor_p99_ms": {
            host: {burst: spread([f[host][burst] for f in floors]) for burst in floors[0][host]}
            for host in floors[0]
        },
        "scenarios": {
            name: {mode: figures(runs) for mode, runs in by_mode.items()}
            for name, by_mode in rows.items()
        },
    }
    (folder / "admission_ab.json").write_text(json.dumps(report, indent=2) + "\n")
    log(f"report: {folder / 'admission_ab.json'}")
    return folder


def figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "refusal_p99_ms": spread(r["refusal_p99_ms"] for r in runs),
        "client_p99_ms": spread(r["client_p99_ms"] for r in runs),
        "over_budget_plus_100ms": spread(r["over_budget_plus_100ms"] for r in runs),
        "refused_share": spread(r["status_counts"].get("503", 0) / r["sent"] for r in runs),
        "no_answer": sum(r["no_answer"] for r in runs),
        "http_5xx_non503": sum(r["http_5xx_non503"] for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loadtest.reliability.admission_ab")
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=DEFAULT_ONLY)
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--held-rate", type=float, default=213.0)
    args = parser.parse_args(argv)
    args.only = set(args.only.split(","))
    args.config = args.config.resolve()
    args.command = "python -m loadtest.reliability.admission_ab " + " ".join(argv or [])
    args.budget_ms = configured_apps(args.config)[0].args.request_budget_ms
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
