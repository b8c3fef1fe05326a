"""Reliability report: faults injected into the local deployment while locust load runs.

    make reliability
    .venv/bin/python -m loadtest.reliability [--seconds 20] [--users 20] [--user-rps 1]

Scenarios, each under the same locust load against serve_config.yaml as shipped:
  baseline               no fault
  member-replica-killed  a member replica process is SIGKILLed mid-run (Serve replaces it)
  feature-store-outage   dynalite is stopped mid-run and started again (re-seeded) later
  slow-member            fault injection makes one member answer 3 s late, from the start

For each: logins sent, answered (any HTTP status), HTTP 5xx, hung (no answer, or slower than
the request budget plus slack), fallback share and p99. Written to
loadtest/results/<timestamp>/reliability.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from app.config.settings import get_settings
from app.local.dynalite import PROJECT_ROOT, Dynalite, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps
from loadtest.locust_runner import LoadResult, LoadTarget, run_locust
from loadtest.systems import EnsembleSystem, derived_serve_config, run_interruptible
from models.train import ensure_trained

RESULTS = PROJECT_ROOT / "loadtest" / "results"
TABLE = "player-features-reliability"
SLACK_MS = 500.0
FAULT_AT_S = 5.0
OUTAGE_S = 8.0


def log(message: str) -> None:
    print(f"[reliability {time.strftime('%H:%M:%S')}] {message}", flush=True)


def summarize(result: LoadResult) -> dict[str, Any]:
    responses = result.outcomes.get("responses", {})
    malformed = sum(result.outcomes.get(k, 0) for k in ("malformed_rejected", "malformed_accepted"))
    return {
        "sent": result.outcomes.get("total", result.requests),
        "answered": responses.get("answered", 0),
        "http_5xx": responses.get("http_5xx", 0),
        "hung": responses.get("late", 0),
        "fallback_share": round(result.fallback_share, 4),
        "p99_ms": result.p99_ms,
        # extras, for reading the scenario
        "malformed_rejected_4xx": result.outcomes.get("malformed_rejected", 0),
        "malformed_sent": malformed,
        "fallback_reasons": result.outcomes.get("fallback", {}),
        "max_ms": responses.get("max_ms"),
        "problems": result.outcomes.get("problems", {}),
    }


def member_replica_pids(system: EnsembleSystem) -> list[int]:
    assert system.process is not None
    pids = []
    for proc in system.process.tree():
        try:
            title = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "ServeReplica:" in title and ":member-" in title:
            pids.append(proc.pid)
    return pids


class Run:
    """One scenario: locust load in a thread while `fault` acts from the main thread."""

    def __init__(self, args: argparse.Namespace, folder: Path, budget_ms: float) -> None:
        self.args = args
        self.folder = folder
        self.late_after_ms = budget_ms + SLACK_MS

    def __call__(
        self, name: str, target: LoadTarget, fault: Callable[[], None] | None = None
    ) -> dict[str, Any]:
        a = self.args
        log(f"{name}: {a.users} users x {a.user_rps} logins/s for {a.seconds}s")
        with ThreadPoolExecutor(max_workers=1) as pool:
            load = pool.submit(
                run_locust,
                target,
                self.folder / name,
                users=self.args.users,
                user_rps=self.args.user_rps,
                run_time_s=self.args.seconds,
                extra_args=["--late-after-ms", str(self.late_after_ms)],
            )
            if fault is not None:
                time.sleep(FAULT_AT_S)
                fault()
            result = load.result()
        summary = summarize(result)
        log(
            f"{name}: sent {summary['sent']}, answered {summary['answered']}, "
            f"5xx {summary['http_5xx']}, hung {summary['hung']}, "
            f"fallback {summary['fallback_share']:.3f}, p99 {summary['p99_ms']:.0f} ms"
        )
        return summary


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    folder = RESULTS / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder.mkdir(parents=True)
    root = get_settings().artifacts_root
    ensure_trained(app.args.game, app.args.version, args.profile, root=root)
    scenario = Run(args, folder, app.args.request_budget_ms)
    scenarios: dict[str, dict[str, Any]] = {}

    with Dynalite(free_port(), data_dir=None, log_path=folder / "dynalite.log") as dynalite:

        def seed() -> None:
            client = dynalite.client(timeout_s=10.0)
            ensure_table(client, TABLE)
            seed_game(client, TABLE, app.args.game, args.players)

        seed()
        log(f"dynalite on {dynalite.endpoint_url}, {args.players} players")

        def ensemble(label: str, slow_member: str | None = None) -> EnsembleSystem:
            port = free_port()
            config, prefix, ray_env = derived_serve_config(
                args.config,
                profile=args.profile,
                port=port,
                endpoint_url=dynalite.endpoint_url,
                table=TABLE,
                out=folder / f"serve_config.{label}.yaml",
            )
            if slow_member is not None:
                document = yaml.safe_load(config.read_text())
                faults = {"slow_members_ms": {slow_member: 3000}}
                document["applications"][0]["args"]["faults"] = faults
                config.write_text(yaml.safe_dump(document, sort_keys=False))
            return EnsembleSystem(config, prefix, port, folder / f"{label}.log", ray_env)

        def target_of(system: EnsembleSystem) -> LoadTarget:
            return LoadTarget(system.port, system.route_prefix, app.args.game, args.players)

        log("starting the ensemble (serve_config.yaml as shipped)")
        with ensemble("shipped") as system:
            target = target_of(system)
            scenarios["baseline"] = scenario("baseline", target)

            def kill_member_replica() -> None:
                victim = member_replica_pids(system)[-1]
                log(f"SIGKILL member replica pid {victim}")
                psutil.Process(victim).send_signal(signal.SIGKILL)

            scenarios["member-replica-killed"] = scenario(
                "member-replica-killed", target, kill_member_replica
            )

            restored = ThreadPoolExecutor(max_workers=1)

            def outage() -> None:
                log("stopping dynalite")
                dynalite.stop()

                def restore() -> None:
                    time.sleep(OUTAGE_S)
                    dynalite.start()
                    seed()
                    log("dynalite back (re-seeded)")

                restored.submit(restore)

            with restored:
                scenarios["feature-store-outage"] = scenario("feature-store-outage", target, outage)
            # Leaving the pool waited for the restore; raise here if it failed.
            if dynalite.pid is None:
                raise RuntimeError("dynalite did not come back after the outage")

        slow = args.slow_member
        log(f"restarting the ensemble with member {slow} delayed 3 s (fault injection)")
        with ensemble("slow-member", slow_member=slow) as system:
            scenarios["slow-member"] = scenario("slow-member", target_of(system))

    report = {
        "command": args.command,
        "started_at": folder.name,
        "settings": {
            "users": args.users,
            "user_rps": args.user_rps,
            "seconds": args.seconds,
            "hung_after_ms": scenario.late_after_ms,
            "fault_at_s": FAULT_AT_S,
            "outage_s": OUTAGE_S,
            "slow_member": slow,
        },
        "scenarios": scenarios,
    }
    (folder / "reliability.json").write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(report))
    print()
    log(f"report: {folder / 'reliability.json'}")
    return folder


def table(report: dict[str, Any]) -> str:
    lines = [
        "| scenario | sent | answered | HTTP 5xx | hung | fallback share | p99 (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in report["scenarios"].items():
        lines.append(
            f"| {name} | {s['sent']} | {s['answered']} | {s['http_5xx']} | {s['hung']} "
            f"| {s['fallback_share']:.3f} | {s['p99_ms']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest.reliability", description=__doc__)
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--profile", default="standard")
    parser.add_argument("--players", type=int, default=2000)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--user-rps", type=float, default=1.0)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--slow-member", default="et-boot3", help="member delayed by 3 s")
    args = parser.parse_args(argv)
    args.command = shlex.join(["python", "-m", "loadtest.reliability", *(argv or sys.argv[1:])])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_interruptible(lambda: run(args), log)


if __name__ == "__main__":
    sys.exit(main())
