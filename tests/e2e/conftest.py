"""The e2e tests' one cluster: the one-node Ray of `make run` (app.local.ray_head: `ray start
--head --block`, fixed ports, metrics exported), started from an empty HOME as on a machine
Ray never ran on, then `serve deploy` of the e2e config (e2e_config) through the dashboard.

One cluster for the package: test_metrics.py (its PromQL counts its own applications only)
and test_serve_deploy.py, whose tests redeploy the config with changes and put it back. A
Ray head, its Serve controller and their replicas are half a minute of a 2-core host's time.
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.ray_env import ray_node_env
from app.config.settings import Settings
from app.local.dynalite import Dynalite
from app.local.processes import PROJECT_ROOT, free_port, port_is_free
from app.local.publishing import local_model_store
from app.local.ray_auth import ray_auth_env
from app.local.ray_head import RayHead, RayHeadFailed
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import configured_apps, edge_env, from_checkout, local_endpoint
from loadtest.harness import serve_status
from loadtest.harness.systems import BIN, run_cli
from models.train import ensure_trained_all

CONFIG = PROJECT_ROOT / "serve_config.yaml"
DASHBOARD_PORT = 8265
DASHBOARD = f"http://127.0.0.1:{DASHBOARD_PORT}"
HTTP_BASE = "http://127.0.0.1:8000"
PLAYERS = 200
API_KEY = "e2e-game-server-key"
AUTH_PREFIX = "/auth-check/2026-11"
ROUTER_APP = "galaxy-raiders"
GAME_PREFIX = "/galaxy-raiders"

# test_metrics.py's service: both shipped versions (tiny profile, one replica each, one member
# weighted out in the canary) behind a router of their own, at routes no other test uses, so
# its PromQL (filtered on these applications) counts exactly the logins it sent.
METRICS = "metrics-check"
METRICS_PREFIX = f"/{METRICS}"
METRICS_WEIGHTED_OUT = "logreg-all"


def cli_env() -> dict[str, str]:
    """As the README deploys: Serve's process settings and the edge's admission where Ray
    starts, and the project's token (`ray start` makes none; the serve CLI sends it only when
    told to)."""
    return {**ray_node_env(), **edge_env(CONFIG), **os.environ, **ray_auth_env()}


def cli(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = run_cli(cli_env(), *args, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


def e2e_config(tmp_path: Path, tiny_version_dir: Path) -> Path:
    """serve_config.yaml as shipped, plus a tiny application whose replicas require an API
    key (configured the way production does it: the key's digest in the replicas'
    environment), plus test_metrics.py's applications. The shipped ones come first: a tool
    that looks for the game's router or the first version finds the shipped ones."""
    document = yaml.safe_load(CONFIG.read_text())
    shipped = document["applications"]
    first = shipped[0]
    env = dict(first["runtime_env"]["env_vars"])
    env["OFFERS_API_KEY_SHA256"] = hashlib.sha256(API_KEY.encode()).hexdigest()
    artifacts_root = str(tiny_version_dir.parents[2])
    auth_check = {
        "name": "auth-check",
        "route_prefix": AUTH_PREFIX,
        "import_path": first["import_path"],
        "runtime_env": {"env_vars": env},
        "args": {
            "game": "galaxy-raiders",
            "version": "2026-11",
            "profile": "tiny",
            "artifacts_root": artifacts_root,
            # Every member in the supervisor (the tiny members' plan): one replica to start.
            "layout": {"placement": "auto"},
            "supervisor": {"num_cpus": 0.05, "autoscaling": {"max_replicas": 1}},
        },
    }
    document["applications"] = [*shipped, auth_check, *metrics_apps(shipped, artifacts_root)]
    path = tmp_path / "serve_config.e2e.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def metrics_apps(shipped: list[dict[str, Any]], artifacts_root: str) -> list[dict[str, Any]]:
    """The shipped versions and router, renamed under METRICS: the tiny build from its folder,
    one replica per deployment, every member in the supervisor (no custom metric comes from
    a member deployment), and METRICS_WEIGHTED_OUT weighted out in the canary."""
    one = {"autoscaling": {"min_replicas": 1, "max_replicas": 1}}
    apps = []
    for original in shipped:
        app = copy.deepcopy(original)
        args = app["args"]
        if app["import_path"].endswith(":build_router"):
            app.update(name=METRICS, route_prefix=METRICS_PREFIX)
            args["router"] = one
            args["versions"] = [
                {**v, "application": f"{METRICS}-{v['version']}"} for v in args["versions"]
            ]
            apps.append(app)
            continue
        version = args["version"]
        app.update(name=f"{METRICS}-{version}", route_prefix=f"{METRICS_PREFIX}/{version}")
        from_checkout(app)
        args.update(
            {
                "profile": "tiny",
                "artifacts_root": artifacts_root,
                "layout": {"placement": "auto"},
                "supervisor": {"num_cpus": 0.05, **one},
                "members": {"num_cpus": 0.05, **one},
            }
        )
        if version == "2026-11":
            args["member_weights"] = {METRICS_WEIGHTED_OUT: 0}
        apps.append(app)
    return apps


@dataclass(frozen=True)
class E2ECluster:
    apps: list  # the shipped config's applications (app.local.serve_config.ConfiguredApp)
    status: dict  # `serve status` once every application was RUNNING
    client: Any  # the DynamoDB client of the cluster's dynalite
    table: str
    head: RayHead
    home: Path  # the HOME the head was given: empty, as on a machine Ray never ran on


@pytest.fixture(scope="package")
def e2e_cluster(tmp_path_factory, tiny_version_dir) -> Iterator[E2ECluster]:
    apps = configured_apps(CONFIG)
    root = Settings().artifacts_root
    # The shipped versions, and their tiny builds (auth-check's, test_metrics.py's).
    served = [(a.args.game, a.args.version, a.args.profile) for a in apps]
    served += [(a.args.game, a.args.version, "tiny") for a in apps]
    ensure_trained_all([(*version, root) for version in served])
    host, port, table = local_endpoint(apps)
    busy = [p for p in (port, 8000, DASHBOARD_PORT) if not port_is_free("127.0.0.1", p)]
    if busy:
        pytest.fail(f"ports {busy} are in use (is `make run` or another Ray running?)")
    folder = tmp_path_factory.mktemp("e2e")
    config = e2e_config(folder, tiny_version_dir)
    home = folder / "home"
    home.mkdir()
    # The Ray processes' settings come from here and the config's runtime_env only: other
    # fixtures of a session may set OFFERS_* in this process (e.g. a feature cache TTL of 0).
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("OFFERS_", "RAY_AUTH"))}
    head_env = {
        **ray_node_env(),
        **inherited,
        # The edge's admission for every application of the config deployed, as the README
        # starts Ray for the config it serves (auth-check's backend included).
        **edge_env(config),
        # A node cache of its own: the replicas copy their versions from the store.
        "OFFERS_MODEL_CACHE_DIR": str(folder / "cache"),
        "HOME": str(home),
        # Exports every 1 s (Ray's default is 10 s): test_metrics.py reads what they count.
        "RAY_metrics_report_interval_ms": "1000",
    }
    # The shipped config loads its versions from the local model store: its S3-protocol
    # server, with the trained versions published, as `make run` starts it.
    with (
        local_model_store(apps, folder / "s3.log"),
        Dynalite(port, data_dir=None, host=host, log_path=folder / "dynalite.log") as dynalite,
    ):
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, table)
        for game in {a.args.game for a in apps}:
            seed_game(client, table, game, PLAYERS)
        # Made here, not before: it makes its temp dir at once, which only stop() removes.
        head = RayHead(
            BIN,
            head_env,
            folder / "ray-head.log",
            metrics_port=free_port(),
            dashboard_port=DASHBOARD_PORT,
            num_cpus=2,
        )
        try:
            head.start()  # stops what it started if it fails
        except RayHeadFailed as exc:
            pytest.fail(str(exc))
        # Stopping the head (`ray start --block`) stops every process of this cluster,
        # replicas included; a `serve shutdown` first only drained them one by one (~30 s).
        try:
            cli("serve", "deploy", str(config), "--address", DASHBOARD)
            names = [*(a.name for a in apps), ROUTER_APP, "auth-check", METRICS]
            names += [f"{METRICS}-{a.args.version}" for a in apps]
            status = _wait_running(names)
            yield E2ECluster(apps, status, client, table, head, home)
        finally:
            head.stop()


@pytest.fixture(scope="package")
def deployed_cluster(e2e_cluster):
    """(apps, status, DynamoDB client, table, (the head's temp dir, its GCS port))."""
    c = e2e_cluster
    return c.apps, c.status, c.client, c.table, (c.head.temp_dir, c.head.gcs_port)


def _wait_running(names: list[str], timeout_s: float = 600) -> dict:
    """`serve status` once every named application is RUNNING. The wait reads the REST API
    the CLI reads: a CLI call every 2 s held about a core away from the replicas starting."""
    try:
        serve_status.wait_running(DASHBOARD, names, timeout_s)
    except (serve_status.DeployFailed, TimeoutError) as exc:
        pytest.fail(str(exc))
    return yaml.safe_load(cli("serve", "status", "--address", DASHBOARD).stdout or "{}") or {}
