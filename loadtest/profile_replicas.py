"""Where a login's CPU goes: py-spy profiles of the serving processes at a steady load.

    .venv/bin/python -m loadtest.profile_replicas --rps 30 --seconds 20

Starts the ensemble as shipped (serve_config.yaml, Serve's process settings) against a
seeded dynalite, drives it with locust at a constant open-loop rate, and records every
replica (supervisors, member deployments) and the Serve proxy actor with `py-spy record`
(non-blocking, 100 Hz) for `--seconds` while the load runs. Every process of the system's
tree (Ray's own, and HAProxy, which is C and not sampled) is also measured by CPU time, by
role, over an idle window first and then the profiled one.

Each sample's stack is attributed to the innermost frame that belongs to a known layer
(model compute, application code, Serve, Ray core and gRPC, HTTP stack, event loop, the
DynamoDB client); "cores" is samples / (seconds x rate), the CPU a process's Python threads
used. Writes loadtest/results/<timestamp>-profile/ (profile.json, profile.md, raw stacks).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from app.config.settings import get_settings
from app.local.processes import PROJECT_ROOT
from app.local.serve_config import configured_apps
from loadtest.harness.locust_runner import LoadTarget, run_locust
from loadtest.harness.resources import (
    ProcessRoles,
    cpu_seconds_by_role,
    role,
    tree_cpu_seconds,
)
from loadtest.harness.results import Study
from loadtest.harness.systems import EnsembleSystem, seeded_ensemble
from models.train import ensure_trained

TABLE = "player-features-profile"
RATE_HZ = 100
# Innermost matching frame wins; the order only breaks ties within one frame.
LAYERS = (
    # onnxruntime: the compiled members' runtime; a predict handed to the executor has no
    # application frame between the thread pool's and Session.run.
    ("model compute", ("onnxruntime", "xgboost", "sklearn", "numpy", "scipy")),
    ("DynamoDB client", ("botocore", "boto3", "urllib3")),
    ("application code", ("/app/",)),
    ("HTTP stack", ("uvicorn", "starlette", "fastapi", "h11", "httptools", "pydantic")),
    ("Serve", ("ray/serve/",)),
    ("Ray core / gRPC", ("ray/_private", "ray/_raylet", "grpc", "ray/util", "ray/actor")),
    ("event loop", ("asyncio", "selectors", "uvloop", "concurrent/futures", "threading")),
)


STUDY = Study("loadtest.profile_replicas", __doc__, "profile")
log = STUDY.log


def layer_of(stack: str) -> str:
    """The layer of a py-spy raw stack ("outer;...;inner"): its innermost known frame."""
    for frame in reversed(stack.split(";")):
        for layer, markers in LAYERS:
            if any(marker in frame for marker in markers):
                return layer
    return "other"


def summarise(raw: str, seconds: float) -> dict[str, Any]:
    layers: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        layers[layer_of(stack)] += n
        leaves[stack.split(";")[-1].strip()] += n
    return {
        "samples": total,
        "cores": round(total / (seconds * RATE_HZ), 3),
        "by_layer": {k: round(v / total, 3) for k, v in layers.most_common()} if total else {},
        "top_frames": [[frame, round(n / total, 3)] for frame, n in leaves.most_common(12)]
        if total
        else [],
    }


def targets(system: EnsembleSystem) -> dict[str, int]:
    """The processes to profile, by role (a deployment's replicas numbered)."""
    assert system.process is not None
    found: dict[str, int] = {}
    for proc in system.process.tree():
        try:
            name = role(" ".join(proc.cmdline()))
        except psutil.Error:
            continue
        # HAProxy is not sampled (C), and Serve replaces its process on every reload, so
        # one pid's CPU can miss it: the role table sums every HAProxy process instead.
        if name.startswith("replica:") or name == "serve proxy actor":
            key, i = name, 1
            while key in found:
                i += 1
                key = f"{name}#{i}"
            found[key] = proc.pid
    return found


def run(args: argparse.Namespace) -> Path:
    app = configured_apps(args.config)[0]
    folder = STUDY.folder("profile")
    ensure_trained(
        app.args.game, app.args.version, args.profile, root=get_settings().artifacts_root
    )
    with seeded_ensemble(
        args.config,
        profile=args.profile,
        game=app.args.game,
        players=args.players,
        table=TABLE,
        folder=folder,
    ) as seeded:
        prefix, port = seeded.route_prefix, seeded.port
        ensemble = EnsembleSystem(
            seeded.config, prefix, port, folder / "ensemble.log", seeded.ray_env
        )
        with ensemble as system:
            pids = targets(system)
            log(f"ready; profiling {', '.join(pids)}")
            # Ray's own processes use CPU with no login at all: read every role's CPU over
            # an idle window first, so each role's cost per login can be told from its
            # fixed cost.
            roles = ProcessRoles()
            idle_before = cpu_seconds_by_role(system.process, roles)
            time.sleep(args.idle_seconds)
            idle = _used(idle_before, cpu_seconds_by_role(system.process, roles))
            target = LoadTarget(port, prefix, app.args.game, args.players)
            load: dict[str, Any] = {}
            users = max(1, round(args.rps / args.user_rps))
            driver = threading.Thread(
                target=lambda: load.update(
                    result=run_locust(
                        target,
                        folder / "locust",
                        users=users,
                        user_rps=args.user_rps,
                        run_time_s=args.seconds + 15,
                        arrivals="open",
                    )
                )
            )
            driver.start()
            time.sleep(8)  # users spawned, caches warm
            cpu_before = {k: tree_cpu_seconds(p) for k, p in pids.items()}
            tree_before = cpu_seconds_by_role(system.process, roles)
            started = time.monotonic()
            spies = {
                name: subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
                        "--duration", str(args.seconds), "--rate", str(RATE_HZ), "--format",
                        "raw", "--nonblocking", "--output",
                        str(folder / f"{name.replace(':', '-')}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
                for name, pid in pids.items()
            }
            for spy in spies.values():
                spy.wait(timeout=args.seconds + 60)
            cpu_after = {k: tree_cpu_seconds(p) for k, p in pids.items()}
            loaded = _used(tree_before, cpu_seconds_by_role(system.process, roles))
            loaded_s = time.monotonic() - started
            driver.join()
    result = load["result"]
    report: dict[str, Any] = {
        "command": args.command,
        "offered_rps": args.rps,
        "achieved_rps": result.total_rps,
        "p50_ms": result.p50_ms,
        "p95_ms": result.p95_ms,
        "seconds": args.seconds,
        "processes": {},
        "roles": _roles_table(
            idle, args.idle_seconds, loaded, loaded_s, result.total_rps or args.rps
        ),
    }
    for name in pids:
        cpu = (cpu_after[name] - cpu_before[name]) / args.seconds
        entry: dict[str, Any] = {"cpu_cores": round(cpu, 3)}
        raw = folder / f"{name.replace(':', '-')}.txt"
        if raw.is_file():
            entry |= summarise(raw.read_text(), args.seconds)
        report["processes"][name] = entry
    STUDY.save(folder, "profile.json", report)
    (folder / "profile.md").write_text(markdown(report))
    print(markdown(report))
    log(f"profile: {folder / 'profile.md'}")
    return folder


def _used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each role used between two readings (a role's exited processes drop out
    of the later one, so a negative difference is read as nothing)."""
    return {k: max(0.0, v - before.get(k, 0.0)) for k, v in after.items()}


def _roles_table(
    idle: dict[str, float],
    idle_s: float,
    loaded: dict[str, float],
    loaded_s: float,
    logins_per_s: float,
) -> dict[str, dict[str, float]]:
    """Per role: cores idle and under load, CPU-ms per login (all of it, and above the
    role's idle rate), highest first; "whole tree" is the bench's CPU per login."""
    rows: dict[str, dict[str, float]] = {}
    for name in sorted(set(idle) | set(loaded)):
        idle_cores = idle.get(name, 0.0) / idle_s
        cores = loaded.get(name, 0.0) / loaded_s
        rows[name] = {
            "idle_cores": round(idle_cores, 4),
            "cores": round(cores, 4),
            "ms_per_login": round(cores * 1000.0 / logins_per_s, 3),
            "ms_per_login_above_idle": round((cores - idle_cores) * 1000.0 / logins_per_s, 3),
        }
    ordered = dict(sorted(rows.items(), key=lambda kv: -kv[1]["ms_per_login"]))
    ordered["whole tree"] = {
        key: round(sum(row[key] for row in rows.values()), 4)
        for key in ("idle_cores", "cores", "ms_per_login", "ms_per_login_above_idle")
    }
    return ordered


def markdown(report: dict[str, Any]) -> str:
    layers = [name for name, _ in LAYERS] + ["other"]
    lines = [
        f"Command: `{report['command']}`; {report['offered_rps']} rps offered, "
        f"{report['achieved_rps']:.1f} achieved, p50 {report['p50_ms']:.0f} ms, "
        f"p95 {report['p95_ms']:.0f} ms, {report['seconds']} s sampled.",
        "",
        "| process | CPU (cores) | " + " | ".join(layers) + " |",
        "|---" * (len(layers) + 2) + "|",
    ]
    for name, p in report["processes"].items():
        shares = p.get("by_layer", {})
        cells = [f"{100 * shares[k]:.0f}%" if k in shares else "" for k in layers]
        lines.append(f"| {name} | {p['cpu_cores']:.2f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Every process of the system's tree by role: cores with no load (before the load "
        "starts) and over the profiled window, and CPU-ms per login:",
        "",
        "| role | cores idle | cores loaded | CPU-ms per login | above idle |",
        "|---|---|---|---|---|",
    ]
    for name, row in report["roles"].items():
        lines.append(
            f"| {name} | {row['idle_cores']:.3f} | {row['cores']:.3f} | "
            f"{row['ms_per_login']:.2f} | {row['ms_per_login_above_idle']:.2f} |"
        )
    lines += ["", "Top frames (self time) per process:", ""]
    for name, p in report["processes"].items():
        frames = p.get("top_frames", [])[:5]
        top = ", ".join(f"{frame} {100 * share:.0f}%" for frame, share in frames)
        if top:
            lines.append(f"- {name}: {top}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = STUDY.parser()
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--profile", default="standard", help="member-cost profile")
    parser.add_argument("--rps", type=float, default=30.0, help="offered load, open loop")
    parser.add_argument("--user-rps", type=float, default=0.5)
    parser.add_argument("--seconds", type=int, default=20, help="profiled window")
    parser.add_argument(
        "--idle-seconds", type=float, default=15.0, help="window with no load, before it"
    )
    parser.add_argument("--players", type=int, default=10_000)
    return STUDY.parse(parser, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
