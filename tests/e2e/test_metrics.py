"""A real Prometheus scrapes the e2e cluster (tests/e2e/conftest.py: the one-node Ray of
`make run`, started from an empty HOME): both versions and the game router as shipped, in the
tiny profile, one replica per deployment, and one member weighted out in the canary (the
METRICS applications, beside the shipped ones). The test sends a known set of logins and
checks that PromQL over each custom metric, on those applications, returns exactly what those
logins imply; then, under a light steady load, that every panel of the Grafana dashboard
returns data from that Prometheus.

No other test sends a login to the METRICS applications or changes them.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter

import pytest
import requests

from app.contract import metrics as spec
from app.local.dashboard import panels
from app.local.prometheus import Prometheus, values
from app.local.ray_auth import TOKEN_FILE, auth_header
from loadtest.harness.systems import run_cli
from models.population import player_id
from tests.conftest import TEST_GAME
from tests.e2e.conftest import HTTP_BASE, METRICS, METRICS_PREFIX, PLAYERS

pytestmark = pytest.mark.e2e

VERSIONS = ("2026-10", "2026-11")
# Every query counts the METRICS applications' series only (Serve labels each series with
# its application).
MINE = f'application=~"{METRICS}(-.*)?"'


@pytest.fixture(scope="module")
def scraped(e2e_cluster, tmp_path_factory):
    """(base URL of the METRICS routes, Prometheus scraping the cluster's metrics port)."""
    log = tmp_path_factory.mktemp("prometheus") / "prom.log"
    with Prometheus([f"127.0.0.1:{e2e_cluster.head.metrics_port}"], log_path=log) as prom:
        prom.wait_for("up", lambda r: values(r) == [1.0], timeout_s=30)
        yield HTTP_BASE, prom


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
    answers = [post(base, METRICS_PREFIX, pid) for pid in known + unknown]
    answers += [post(base, METRICS_PREFIX, pid) for pid in known]  # cached now
    logins = len(answers)
    by_version = Counter(a["ensemble_version"] for a in answers)
    outcomes = Counter((a["ensemble_version"], a["fallback_reason"] or "none") for a in answers)
    scored = [a for a in answers if a["fallback_reason"] is None]
    assert len(scored) == 2 * len(known) and set(by_version) == set(VERSIONS)
    canary_scored = sum(1 for a in scored if a["ensemble_version"] == "2026-11")

    # Answers by outcome and reason, per version.
    answers_metric = spec.ANSWERS.exported
    settled(prom, f"sum({answers_metric}{{{MINE}}})", logins)
    for (version, reason), count in outcomes.items():
        q = f'sum({answers_metric}{{{MINE},version="{version}",reason="{reason}"}})'
        assert values(prom.query(q)) == [count], q
    assert values(prom.query(f'sum({answers_metric}{{{MINE},outcome="fallback"}})')) == [3]

    # Login latency: one observation per answer.
    settled(prom, f"sum({spec.LOGIN_LATENCY.exported}_count{{{MINE}}})", logins)

    # Members answered per scored login: every member, minus the canary's weighted-out one.
    members = answers[0]["members_total"]
    ma = spec.MEMBERS_ANSWERED.exported
    settled(prom, f"sum({ma}_count{{{MINE}}})", len(scored))
    expected_sum = len(scored) * members - canary_scored
    settled(prom, f"sum({ma}_sum{{{MINE}}})", expected_sum)
    assert sum(a["members_answered"] for a in scored) == expected_sum

    # Missing members: the weighted-out member, once per canary login it was scored for.
    q = f"sum by (reason) ({spec.MEMBER_MISSING.exported}{{{MINE}}})"
    settled_by(prom, q, ("reason",), {"weighted_out": float(canary_scored)})

    # Per-member latency: one observation per fan-out round (sequential logins: one round
    # per scored login) for each member of that version.
    ml = spec.MEMBER_LATENCY.exported
    for version in VERSIONS:
        rounds = sum(1 for a in scored if a["ensemble_version"] == version)
        q = f'sum({ml}_count{{{MINE},version="{version}",member="xgb-all"}})'
        settled(prom, q, rounds)

    # Coalesced rounds: logins per round (sequential logins: one each), and rows per round,
    # the version's candidate offers, in the bucket that holds that number.
    settled(prom, f"sum({spec.BATCH_LOGINS.exported}_sum{{{MINE}}})", len(scored))
    offers = len(
        requests.get(f"{base}{METRICS_PREFIX}/2026-10/v1/ensemble", timeout=10).json()["offers"]
    )
    upper = min(b for b in spec.BATCH_ROW_BUCKETS if b >= offers)
    lower = max((b for b in spec.BATCH_ROW_BUCKETS if b < offers), default=None)
    rows = spec.BATCH_ROWS.exported
    settled(prom, f'sum({rows}_bucket{{{MINE},le="{float(upper)}"}})', len(scored))
    if lower is not None:
        assert values(prom.query(f'sum({rows}_bucket{{{MINE},le="{float(lower)}"}})')) == [0]

    # Feature cache: one lookup per login; the second login of each known player is a hit.
    q = f"sum by (result) ({spec.FEATURE_CACHE.exported}{{{MINE}}})"
    settled_by(prom, q, ("result",), {"hit": len(known), "miss": len(known) + len(unknown)})

    # DynamoDB reads: every miss was read, all successfully.
    q = f"sum by (outcome) ({spec.DYNAMODB_READ.exported}_count{{{MINE}}})"
    reads = by(prom, q, "outcome")
    assert set(reads) == {"ok"} and 1 <= reads["ok"] <= len(known) + len(unknown)

    # The breaker is closed on both supervisors.
    q = f"{spec.BREAKER_OPEN.exported}{{{MINE}}}"
    breaker = prom.wait_for(q, lambda r: len(r) == 2, timeout_s=30)
    assert values(breaker) == [0.0, 0.0]

    # The version split's choices: every login, as assigned, none rerouted. The router's
    # process exports on its own timer: read before it had, one login was once missing.
    q = f"sum by (assigned, answered, reason) ({spec.VERSION_ROUTED.exported}{{{MINE}}})"
    expected = {(v, v, "none"): float(n) for v, n in by_version.items()}
    settled_by(prom, q, ("assigned", "answered", "reason"), expected)


def test_every_dashboard_panel_has_data_under_load(scraped):
    base, prom = scraped
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            pid = player_id(i % PLAYERS) if i % 10 else f"never-registered-{i}"
            requests.post(
                f"{base}{METRICS_PREFIX}/v1/offers",
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


def test_the_local_head_starts_and_answers_from_an_empty_home(e2e_cluster):
    """Ray 2.60's `ray start` never makes a token: the head brings the project's own
    (app.local.ray_auth), and nothing is written under the HOME it was given. Last in the
    module, so that in a full run the HOME is checked after a deploy and a scrape as well."""
    head = e2e_cluster.head
    assert head.env["RAY_AUTH_TOKEN_PATH"] == str(TOKEN_FILE)
    # Token auth is on: refused without the token, answered with the project's.
    url = f"{head.dashboard_url}/api/serve/applications/"
    assert requests.get(url, timeout=10).status_code == 401
    answered = requests.get(url, headers=auth_header(), timeout=10)
    assert answered.status_code == 200, answered.text
    # The CLI a user runs against it, from the same empty HOME.
    status = run_cli(head.env, "serve", "status", "--address", head.dashboard_url, timeout=300)
    assert status.returncode == 0, status.stderr[-2000:]
    assert "applications" in status.stdout
    assert list(e2e_cluster.home.iterdir()) == [], "nothing may be written under its HOME"
