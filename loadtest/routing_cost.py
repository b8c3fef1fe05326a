"""What the game router's hop costs: c=1 latency through /<game>/v1/offers against a
version's own route, in interleaved rounds.

    .venv/bin/python -m loadtest.routing_cost --rounds 5

Serves every application of the config (both versions and the router) with `serve run`
against a seeded dynalite, through the documented ingress (HAProxy on the config's port,
Serve's process settings), then alternates c=1 probes (300 sequential logins on one
keep-alive connection, after 30 untimed ones) over the routed path and each version's own
path. Writes loadtest/results/<timestamp>-routing/routing.json and prints a table of
medians with their min-max.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from app.config.ray_env import ray_node_env
from app.config.settings import get_settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import (
    ROUTER_IMPORT_PATH,
    configured_apps,
    edge_env,
    from_checkout,
)
from loadtest.harness.http_ready import wait_answers
from loadtest.harness.probe import latency_probe
from loadtest.harness.results import Study, spread
from loadtest.harness.systems import EnsembleSystem, dynamo_env
from models.train import ensure_trained

TABLE = "player-features-routing"


STUDY = Study("loadtest.routing_cost", __doc__, "routing")
log = STUDY.log


def whole_config(base: Path, *, port: int, endpoint_url: str, out: Path) -> dict[str, str]:
    """Every application of `base`, on `port`, against the given dynalite; returns
    path name -> route prefix ("routed" and one per version)."""
    document = yaml.safe_load(base.read_text())
    document["http_options"] = {**document.get("http_options", {}), "port": port}
    paths: dict[str, str] = {}
    for app in document["applications"]:
        if app["import_path"] == ROUTER_IMPORT_PATH:
            paths["routed"] = app["route_prefix"]
            continue
        env = app.setdefault("runtime_env", {}).setdefault("env_vars", {})
        env.update(dynamo_env(endpoint_url, TABLE))
        from_checkout(app)  # no local model store in this run
        paths[f"pinned {app['args']['version']}"] = app["route_prefix"]
    if "routed" not in paths:
        raise SystemExit(f"{base} has no router application")
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return paths


def run(args: argparse.Namespace) -> Path:
    apps = configured_apps(args.config)
    folder = STUDY.folder("routing")
    for app in apps:
        ensure_trained(
            app.args.game, app.args.version, app.args.profile, root=get_settings().artifacts_root
        )
    game = apps[0].args.game
    with Dynalite(free_port(), data_dir=None, log_path=folder / "dynalite.log") as dynalite:
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, TABLE)
        seed_game(client, TABLE, game, args.players)
        port = free_port()
        paths = whole_config(
            args.config, port=port, endpoint_url=dynalite.endpoint_url, out=folder / "serve.yaml"
        )
        system = EnsembleSystem(
            folder / "serve.yaml",
            paths["routed"],
            port,
            folder / "serve.log",
            {**ray_node_env(), **edge_env(folder / "serve.yaml")},
        )
        with system:
            for prefix in paths.values():  # the router is up before its versions may be
                wait_answers(f"{system.base_url}{prefix}/healthz", timeout_s=600, poll_s=1)
            log(f"serving {paths}")
            p50s: dict[str, list[float]] = {name: [] for name in paths}
            errors = 0
            for round_ in range(1, args.rounds + 1):
                for name, prefix in paths.items():
                    result = latency_probe(port, prefix, game, args.players)
                    p50s[name].append(result.p50_ms)
                    errors += result.errors
                    log(f"round {round_} {name}: c=1 p50 {result.p50_ms:.1f} ms")
    report: dict[str, Any] = {
        "command": args.command,
        "rounds": args.rounds,
        "errors": errors,
        "c1_p50_ms": {name: spread(values, digits=2) for name, values in p50s.items()},
        "runs": p50s,
    }
    routed = report["c1_p50_ms"]["routed"]["median"]
    report["routed_minus_pinned_ms"] = {
        name: round(routed - s["median"], 2)
        for name, s in report["c1_p50_ms"].items()
        if name != "routed"
    }
    STUDY.save(folder, "routing.json", report)
    print("| path | c=1 p50 (ms), median [min–max] |\n|---|---|")
    for name, s in report["c1_p50_ms"].items():
        print(f"| {name} | {s['median']} [{s['min']}–{s['max']}] |")
    print(f"errors: {errors}; routed minus pinned: {report['routed_minus_pinned_ms']}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser()
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--players", type=int, default=2000)
    args = STUDY.parse(parser, argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
