"""A real Prometheus scrapes a running deployment: both versions and the game router.

The cluster is started the way `make run` starts it (app.local.ray_head: a one-node Ray with
a fixed metrics port), from an empty HOME as on a machine where Ray never ran. The config is
serve_config.yaml with the tiny profile, one replica per deployment, and one member weighted
out in the canary. The test sends a known set of
logins and checks that PromQL over each custom metric returns exactly what those logins
imply; then, under a light steady load, that every panel of the Grafana dashboard returns
data from that Prometheus.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from app.contract import metrics as spec
from app.local.dashboard import panels
from app.local.processes import LOCAL_CREDENTIALS, PROJECT_ROOT, free_port
from app.local.prometheus import Prometheus, values
from app.local.ray_auth import TOKEN_FILE, auth_header
from app.local.ray_head import RayHead
from app.local.serve_config import from_checkout
from loadtest.harness.systems import BIN, run_cli
from models.population import player_id
from models.train import ensure_trained
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE

pytestmark = pytest.mark.integration

WEIGHTED_OUT = "logreg-all"
VERSIONS = ("2026-10", "2026-11")
ROUTER = "galaxy-raiders"


def tiny_config(path: Path, http_port: int, endpoint_url: str, artifacts_root: Path) -> None:
    document = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    document["http_options"] = {**document["http_options"], "port": http_port}
    one = {"autoscaling": {"min_replicas": 1, "max_replicas": 1}}
    for app in document["applications"]:
        if app["import_path"].endswith(":build_router"):
            app["args"]["router"] = one
            continue
        app["runtime_env"]["env_vars"].update(
            {
                "OFFERS_DYNAMODB_ENDPOINT_URL": endpoint_url,
                "OFFERS_DYNAMODB_TABLE": TEST_TABLE,
                "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIALS["aws_access_key_id"],
                "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIALS["aws_secret_access_key"],
            }
        )
        from_checkout(app)  # the tiny build, from its folder
        args = app["args"]
        args.update(
            {
                "profile": "tiny",
                "artifacts_root": str(artifacts_root),
                # Every member in the supervisor (the plan for the tiny members): no
                # custom metric comes from a member deployment, and each replica fewer is
                # ~7 CPU-s of start on a 2-core host.
                "layout": {"placement": "auto"},
                "supervisor": {"num_cpus": 0.05, **one},
                "members": {"num_cpus": 0.05, **one},
            }
        )
        if args["version"] == "2026-11":
            args["member_weights"] = {WEIGHTED_OUT: 0}
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(env, *args, timeout=300)


@dataclass(frozen=True)
class LocalHead:
    head: RayHead
    home: Path  # the HOME its processes were given: empty, as on a machine Ray never ran on


@pytest.fixture(scope="module")
def local_head(tmp_path_factory):
    """The one-node Ray of `make run` (app.local.ray_head), started as a new user would:
    a HOME with nothing in it and no token settings of Ray's in the environment."""
    folder = tmp_path_factory.mktemp("metrics-head")
    home = folder / "home"
    home.mkdir()
    # Export every 1 s (Ray's default is 10 s) so the test does not wait on the exporter.
    # The replicas' settings come from the config's runtime_env only: other fixtures of the
    # session set OFFERS_* in this process (e.g. a feature cache TTL of 0).
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("OFFERS_", "RAY_AUTH"))
    }
    env = {**inherited, "HOME": str(home), "RAY_metrics_report_interval_ms": "1000"}
    head = RayHead(
        BIN,
        env,
        folder / "ray-head.log",
        metrics_port=free_port(),
        dashboard_port=free_port(),
        num_cpus=2,
    )
    with head:
        yield LocalHead(head, home)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory, local_head, dynalite_server, tiny_version_dir):
    """(base URL, Prometheus) for the deployed config; everything is stopped afterwards."""
    for version in VERSIONS:
        ensure_trained(TEST_GAME, version, "tiny", root=tiny_version_dir.parents[2])
    folder = tmp_path_factory.mktemp("metrics")
    http_port = free_port()
    config = folder / "serve_config.yaml"
    tiny_config(config, http_port, dynalite_server.endpoint_url, tiny_version_dir.parents[2])
    head = local_head.head
    result = cli(head.env, "serve", "deploy", str(config), "--address", head.dashboard_url)
    assert result.returncode == 0, result.stderr[-3000:]
    base = f"http://127.0.0.1:{http_port}"
    _wait_healthy([f"{base}/{TEST_GAME}/{v}/healthz" for v in VERSIONS], head, result)
    with Prometheus([f"127.0.0.1:{head.metrics_port}"], log_path=folder / "prom.log") as prom:
        prom.wait_for("up", lambda r: values(r) == [1.0], timeout_s=30)
        yield base, prom


def _wait_healthy(urls: list[str], head: RayHead, deploy, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while True:
            try:
                if requests.get(url, timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{url} not healthy; see {head.log_path}\n{deploy.stdout[-2000:]}")
            time.sleep(1)


def post(base: str, prefix: str, pid: str) -> dict:
    response = requests.post(
        f"{base}{prefix}/v1/offers", json={"player_id": pid, "game": TEST_GAME}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


def by(prom: Prometheus, promql: str, label: str) -> dict[str, float]:
    return {
        sample["metric"].get(label, ""): float(sample["value"][1]) for sample in prom.query(promql)
    }


def settled_by(
    prom: Prometheus, promql: str, labels: tuple[str, ...], expected: dict, timeout_s: float = 60
) -> None:
    """Wait until the query's samples, keyed by `labels`, are exactly `expected`.

    Each replica process exports its own metrics on its own timer (every 1 s here), and the
    router is a different process from the supervisors: a count that settled in one of them
    says nothing about the others, so every query waits for what it asserts.
    """

    def key(sample: dict) -> tuple[str, ...] | str:
        found = tuple(sample["metric"].get(label, "") for label in labels)
        return found[0] if len(found) == 1 else found

    prom.wait_for(
        promql,
        lambda r: {key(s): float(s["value"][1]) for s in r} == expected,
        timeout_s=timeout_s,
    )


def settled(prom: Prometheus, promql: str, expected: float, timeout_s: float = 60) -> float:
    """The query's single value once it equals `expected` (the exporter and scrapes lag)."""
    result = prom.wait_for(
        promql, lambda r: len(r) == 1 and values(r)[0] == expected, timeout_s=timeout_s
    )
    return values(result)[0]


def test_each_custom_metric_counts_what_the_requests_imply(scraped):
    base, prom = scraped
    known = [player_id(i) for i in range(20)]
    unknown = [f"never-registered-{i}" for i in range(3)]
    answers = [post(base, f"/{TEST_GAME}", pid) for pid in known + unknown]
    answers += [post(base, f"/{TEST_GAME}", pid) for pid in known]  # cached now
    logins = len(answers)
    by_version = Counter(a["ensemble_version"] for a in answers)
    outcomes = Counter((a["ensemble_version"], a["fallback_reason"] or "none") for a in answers)
    scored = [a for a in answers if a["fallback_reason"] is None]
    assert len(scored) == 2 * len(known) and set(by_version) == set(VERSIONS)
    canary_scored = sum(1 for a in scored if a["ensemble_version"] == "2026-11")

    # Answers by outcome and reason, per version.
    answers_metric = spec.ANSWERS.exported
    settled(prom, f"sum({answers_metric})", logins)
    for (version, reason), count in outcomes.items():
        q = f'sum({answers_metric}{{version="{version}",reason="{reason}"}})'
        assert values(prom.query(q)) == [count], q
    assert values(prom.query(f'sum({answers_metric}{{outcome="fallback"}})')) == [3]

    # Login latency: one observation per answer.
    settled(prom, f"sum({spec.LOGIN_LATENCY.exported}_count)", logins)

    # Members answered per scored login: every member, minus the canary's weighted-out one.
    members = answers[0]["members_total"]
    ma = spec.MEMBERS_ANSWERED.exported
    settled(prom, f"sum({ma}_count)", len(scored))
    expected_sum = len(scored) * members - canary_scored
    settled(prom, f"sum({ma}_sum)", expected_sum)
    assert sum(a["members_answered"] for a in scored) == expected_sum

    # Missing members: the weighted-out member, once per canary login it was scored for.
    q = f"sum by (reason) ({spec.MEMBER_MISSING.exported})"
    settled_by(prom, q, ("reason",), {"weighted_out": float(canary_scored)})

    # Per-member latency: one observation per fan-out round (sequential logins: one round
    # per scored login) for each member of that version.
    ml = spec.MEMBER_LATENCY.exported
    for version in VERSIONS:
        rounds = sum(1 for a in scored if a["ensemble_version"] == version)
        q = f'sum({ml}_count{{version="{version}",member="xgb-all"}})'
        settled(prom, q, rounds)

    # Coalesced rounds: logins per round (sequential logins: one each), and rows per round,
    # the version's candidate offers, in the bucket that holds that number.
    settled(prom, f"sum({spec.BATCH_LOGINS.exported}_sum)", len(scored))
    offers = len(
        requests.get(f"{base}/{TEST_GAME}/2026-10/v1/ensemble", timeout=10).json()["offers"]
    )
    upper = min(b for b in spec.BATCH_ROW_BUCKETS if b >= offers)
    lower = max((b for b in spec.BATCH_ROW_BUCKETS if b < offers), default=None)
    rows = spec.BATCH_ROWS.exported
    settled(prom, f'sum({rows}_bucket{{le="{float(upper)}"}})', len(scored))
    if lower is not None:
        assert values(prom.query(f'sum({rows}_bucket{{le="{float(lower)}"}})')) == [0]

    # Feature cache: one lookup per login; the second login of each known player is a hit.
    q = f"sum by (result) ({spec.FEATURE_CACHE.exported})"
    settled_by(prom, q, ("result",), {"hit": len(known), "miss": len(known) + len(unknown)})

    # DynamoDB reads: every miss was read, all successfully.
    reads = by(prom, f"sum by (outcome) ({spec.DYNAMODB_READ.exported}_count)", "outcome")
    assert set(reads) == {"ok"} and 1 <= reads["ok"] <= len(known) + len(unknown)

    # The breaker is closed on both supervisors.
    breaker = prom.wait_for(spec.BREAKER_OPEN.exported, lambda r: len(r) == 2, timeout_s=30)
    assert values(breaker) == [0.0, 0.0]

    # The version split's choices: every login, as assigned, none rerouted. The router's
    # process exports on its own timer: read before it had, one login was once missing.
    q = f"sum by (assigned, answered, reason) ({spec.VERSION_ROUTED.exported})"
    expected = {(v, v, "none"): float(n) for v, n in by_version.items()}
    settled_by(prom, q, ("assigned", "answered", "reason"), expected)


def test_every_dashboard_panel_has_data_under_load(scraped):
    base, prom = scraped
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            pid = player_id(i % TEST_PLAYERS) if i % 10 else f"never-registered-{i}"
            requests.post(
                f"{base}/{TEST_GAME}/v1/offers",
                json={"player_id": pid, "game": TEST_GAME},
                timeout=30,
            )
            i += 1
            time.sleep(0.1)

    driver = threading.Thread(target=load, daemon=True)
    driver.start()
    try:
        empty: dict[str, list[str]] = {}
        deadline = time.monotonic() + 90
        pending = panels()
        while pending and time.monotonic() < deadline:
            still = []
            for title, queries in pending:
                missing = [q for q in queries if not _has_data(prom, q)]
                if missing:
                    still.append((title, queries))
                    empty[title] = missing
                else:
                    empty.pop(title, None)
            pending = still
            if pending:
                time.sleep(2)
        assert not pending, f"panels without data: {empty}"
    finally:
        stop.set()
        driver.join(timeout=35)


def _has_data(prom: Prometheus, promql: str) -> bool:
    return any(not math.isnan(v) for v in values(prom.query(promql)))


def test_the_local_head_starts_and_answers_from_an_empty_home(local_head):
    """Ray 2.60's `ray start` never makes a token: the head brings the project's own
    (app.local.ray_auth), and nothing is written under the HOME it was given. Last in the
    module, so that in a full run the HOME is checked after a deploy and a scrape as well."""
    head = local_head.head
    assert head.env["RAY_AUTH_TOKEN_PATH"] == str(TOKEN_FILE)
    # Token auth is on: refused without the token, answered with the project's.
    url = f"{head.dashboard_url}/api/serve/applications/"
    assert requests.get(url, timeout=10).status_code == 401
    answered = requests.get(url, headers=auth_header(), timeout=10)
    assert answered.status_code == 200, answered.text
    # The CLI a user runs against it, from the same empty HOME.
    status = cli(head.env, "serve", "status", "--address", head.dashboard_url)
    assert status.returncode == 0, status.stderr[-2000:]
    assert "applications" in status.stdout
    assert list(local_head.home.iterdir()) == [], "nothing may be written under its HOME"
