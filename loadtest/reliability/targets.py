"""What the reliability scenarios run against: the run's own 2-node cluster, or a running
`make run` (`--target local`). Both are reached through the documented ingress on :8000."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
import yaml

from app.config.router_args import RouterAppArgs
from app.core.routing.version_split import VersionSplit
from app.local.dynalite import Dynalite
from app.local.serve_config import ROUTER_IMPORT_PATH
from loadtest.harness import serve_status
from loadtest.harness.cluster import LocalCluster
from loadtest.harness.http_ready import answers
from loadtest.reliability.faults import DelayProxyProcess
from models.population import player_id

PORT = 8000  # HAProxy binds the config's http_options port
DASHBOARD = "http://127.0.0.1:8265"  # `make run`'s (app.local.cli.DASHBOARD_PORT)


@dataclass
class Target:
    """What the scenarios run against: the run's own 2-node cluster (with the delay proxy
    and a supervised dynalite), or a running `make run` (`--target local`), where only the
    faults it can inject on this host run."""

    port: int  # the documented ingress (HAProxy)
    game: str
    # "version": the first ensemble application's route; "game": its game's router.
    routes: dict[str, str]
    version_app: str  # that first application (the canary in serve_config.yaml)
    version: str
    canary_players: list[str]  # players the game's split sends to that version
    # HAProxy's backend for each route (Serve's `http-<application>`): who refused there.
    backends: dict[str, str] = field(default_factory=dict)
    # The DynamoDB endpoint's port on this host (tier_outage_fresh pauses what listens there).
    store_port: int | None = None
    cluster: LocalCluster | None = None
    dynalite: Dynalite | None = None
    proxy: DelayProxyProcess | None = None


def local_target(args: argparse.Namespace, app: Any) -> Target:
    """A running `make run` on this host, checked before any load is sent: it answers, and
    serves the applications of `--config` as that file declares them (the report names the
    file, and the scenarios take routes and budgets from it)."""
    url = f"http://127.0.0.1:{PORT}{app.route_prefix}/healthz"
    if not answers(url, timeout_s=5):
        raise SystemExit(f"--target local: {url} does not answer; start `make run` first")
    declared = yaml.safe_load(args.config.read_text())["applications"]
    try:
        served = serve_status.applications(DASHBOARD)
    except requests.RequestException as exc:
        raise SystemExit(
            f"--target local: {DASHBOARD} (make run's dashboard) did not list what it serves: {exc}"
        ) from exc
    if differing := not_as_declared(declared, served):
        raise SystemExit(
            f"--target local: `make run` does not serve {args.config.name} as declared "
            f"(applications {differing}); pass the config it serves, `--config <file>`"
        )
    return make_target(args, app)


def not_as_declared(declared: list[dict[str, Any]], served: dict[str, dict[str, Any]]) -> list[str]:
    """The names of the `declared` applications (a Serve config's) that Serve does not run
    at the same route with the same args; `served`: its REST API's details, by name."""

    def as_declared(app: dict[str, Any]) -> bool:
        # Serve's details leave out what the config left out (its defaults: "/", no args).
        deployed = (served.get(app["name"]) or {}).get("deployed_app_config") or {}
        return (deployed.get("route_prefix", "/"), deployed.get("args") or {}) == (
            app.get("route_prefix", "/"),
            app.get("args") or {},
        )

    return [app["name"] for app in declared if not as_declared(app)]


def make_target(args: argparse.Namespace, app: Any, **faults: Any) -> Target:
    """The first application's route, its game's router and the players it serves."""
    document = yaml.safe_load(args.config.read_text())
    router = next(
        a
        for a in document["applications"]
        if a.get("import_path") == ROUTER_IMPORT_PATH and a["args"]["game"] == app.args.game
    )
    knobs = RouterAppArgs.model_validate(router["args"]).knobs()
    split = VersionSplit(app.args.game, list(knobs.weights), knobs.weights)
    players = (player_id(i) for i in range(args.players))
    endpoint = urlsplit(str(app.settings.dynamodb_endpoint_url or ""))
    return Target(
        port=PORT,
        store_port=endpoint.port,
        game=app.args.game,
        routes={"version": app.route_prefix, "game": router.get("route_prefix", "/")},
        backends={"version": f"http-{app.name}", "game": f"http-{router['name']}"},
        version_app=app.name,
        version=app.args.version,
        canary_players=[p for p in players if split.assign(p) == app.args.version],
        **faults,
    )
