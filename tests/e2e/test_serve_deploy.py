"""The production CLI path: `ray start --head`, `serve deploy serve_config.yaml`, then HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from app.contract.manifest import load_manifest
from app.local.dynalite import PROJECT_ROOT, Dynalite, free_port, port_is_free
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import SERVE_PROCESS_ENV, configured_apps, local_endpoint
from app.serving.member_layout import plan_groups
from models.population import player_id
from tests.conftest import POPULATION_SEED

pytestmark = pytest.mark.e2e

CONFIG = PROJECT_ROOT / "serve_config.yaml"
DASHBOARD = "http://127.0.0.1:8265"
HTTP_BASE = "http://127.0.0.1:8000"
PLAYERS = 200
BIN = Path(sys.executable).parent
# Ray 2.60 turns token auth on for new local clusters (`ray start` writes ~/.ray/auth_token);
# the serve CLI only sends that token when told the cluster uses token auth.
# As the README deploys: Serve's process settings (SERVE_PROCESS_ENV) set where Ray starts.
CLI_ENV = {**SERVE_PROCESS_ENV, **os.environ, "RAY_AUTH_MODE": "token"}


def cli(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=CLI_ENV,
    )
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def deployed_cluster():
    from models.train import ensure_trained

    apps = configured_apps(CONFIG)
    for app in apps:
        ensure_trained(app.args.game, app.args.version, app.args.profile)
    host, port, table = local_endpoint(apps)
    busy = [p for p in (port, 8000, 8265) if not port_is_free("127.0.0.1", p)]
    if busy:
        pytest.fail(f"ports {busy} are in use (is `make run` or another Ray running?)")

    with Dynalite(port, data_dir=None, host=host) as dynalite:
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, table)
        for game in {a.args.game for a in apps}:
            seed_game(client, table, game, PLAYERS, seed=POPULATION_SEED)
        try:
            cli(
                "ray",
                "start",
                "--head",
                "--num-cpus=2",
                f"--port={free_port()}",
                "--dashboard-host=127.0.0.1",
                "--dashboard-port=8265",
                "--disable-usage-stats",
            )
            cli("serve", "deploy", str(CONFIG), "--address", DASHBOARD)
            yield apps, _wait_running([a.name for a in apps])
        finally:
            cli("serve", "shutdown", "--yes", "--address", DASHBOARD, check=False)
            cli("ray", "stop", "--force", check=False)


def _wait_running(names: list[str], timeout_s: float = 600) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        result = cli("serve", "status", "--address", DASHBOARD, check=False)
        status = yaml.safe_load(result.stdout or "{}") or {}
        apps = status.get("applications") or {}
        states = {name: (apps.get(name) or {}).get("status") for name in names}
        if all(state == "RUNNING" for state in states.values()):
            return status
        if any(state == "DEPLOY_FAILED" for state in states.values()):
            pytest.fail(f"deploy failed:\n{result.stdout}")
        if time.monotonic() > deadline:
            pytest.fail(f"not RUNNING after {timeout_s}s: {states}\n{result.stdout}")
        time.sleep(2)


def test_serve_deploy_serves_personalized_offers(deployed_cluster):
    apps, status = deployed_cluster
    for app in apps:
        deployments = status["applications"][app.name]["deployments"]
        manifest = load_manifest(app.args.version_dir())
        groups = plan_groups(manifest.members, app.args.layout)
        assert set(deployments) == {"supervisor"} | {g.deployment for g in groups}
        assert all(d["status"] == "HEALTHY" for d in deployments.values())

        response = requests.post(
            f"{HTTP_BASE}{app.route_prefix}/v1/offers",
            json={"player_id": player_id(11), "game": app.args.game},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["personalized"] is True
        assert body["members_answered"] == body["members_total"] == len(manifest.members) >= 12
