"""The Grafana dashboard: the committed JSON is a fresh render, it covers every metric of the
contract, and every panel's PromQL is accepted by a real Prometheus."""

from __future__ import annotations

import json
import re

import pytest

from app.contract.metrics import ALL, Kind
from app.local import dashboard
from app.local.processes import free_port
from app.local.prometheus import Prometheus

pytestmark = pytest.mark.unit

REQUIRED_TITLES = (
    "Logins/s by outcome",
    "Login latency p50 / p95 / p99",
    "Fallback share by reason",
    "Members answered per login",
    "Member latency p95 by member",
    "Member missing/s by member and reason",
    "Coalesced batch size: logins per round (mean)",
    "Coalesced batch size: rows per round (mean)",
    "Feature cache hit ratio",
    "DynamoDB read latency p95 by operation",
    "Breaker state by replica",
    "Replicas per deployment",
    "Version split: logins/s by assigned and answered version",
)
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# What PromQL calls functions, aggregations and operators in these queries: not series.
KEYWORDS = {"sum", "max", "rate", "histogram_quantile", "vector", "or"}
# Label matchers, range windows and grouping clauses hold label names, not series.
NOT_SERIES = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\b(?:by|ignoring|group_left)\s*\([^)]*\)")


def series_names(expr: str) -> set[str]:
    """The series a query reads."""
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", NOT_SERIES.sub(" ", expr))) - KEYWORDS


def test_committed_json_is_a_fresh_render():
    committed = dashboard.DEFAULT_OUT.read_text()
    assert committed == dashboard.render(), "stale: run `make dashboard`"


def test_the_cli_writes_what_render_returns(tmp_path):
    out = tmp_path / "nested" / "dashboard.json"
    assert dashboard.main(["--out", str(out)]) == 0
    assert out.read_text() == dashboard.render()
    assert out.read_text().endswith("}\n")


def test_every_required_panel_has_a_query():
    by_title = dict(dashboard.panels())
    for title in REQUIRED_TITLES:
        assert by_title.get(title), title
    assert len(by_title) == len(dashboard.panels()), "duplicate titles"


def test_series_names_are_the_series_a_query_reads():
    expr = (
        'sum by (reason) (rate(a_total{outcome="fallback"}[1m])) / ignoring (reason)'
        " group_left () max by (le) (b_bucket) or vector(0)"
    )
    assert series_names(expr) == {"a_total", "b_bucket"}


def test_every_metric_of_the_contract_is_on_a_panel():
    read = set().union(*(series_names(e) for _, exprs in dashboard.panels() for e in exprs))
    for spec in ALL:
        if spec.kind is Kind.HISTOGRAM:
            assert {spec.exported + s for s in HISTOGRAM_SERIES} & read, spec.name
        else:
            assert spec.exported in read, spec.name
    assert dashboard.SERVE_REPLICA_HEALTHY in read


def test_queries_use_fixed_windows_that_raw_prometheus_understands():
    for title, exprs in dashboard.panels():
        for expr in exprs:
            assert "$" not in expr, title  # no Grafana variables: they only resolve in Grafana
            assert set(re.findall(r"\[([^\]]+)\]", expr)) <= {dashboard.WINDOW}, title


def test_the_json_is_a_grafana_dashboard_of_those_panels():
    document = json.loads(dashboard.DEFAULT_OUT.read_text())
    assert document["uid"] == dashboard.UID
    assert [v["name"] for v in document["templating"]["list"]] == ["DS_PROMETHEUS"]
    panels = document["panels"]
    assert [p["title"] for p in panels] == [title for title, _ in dashboard.panels()]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel, (_, exprs) in zip(panels, dashboard.panels(), strict=True):
        assert panel["type"] == "timeseries"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        assert [t["expr"] for t in panel["targets"]] == exprs
        assert len({t["refId"] for t in panel["targets"]}) == len(exprs)


@pytest.mark.timeout(60)
def test_every_panel_query_is_valid_promql():
    # Nothing listens on the target: the queries have no data, but Prometheus still parses
    # and evaluates each one (a syntax or type error comes back as an error status).
    with Prometheus([f"127.0.0.1:{free_port()}"]) as prom:
        for title, exprs in dashboard.panels():
            for expr in exprs:
                assert isinstance(prom.query(expr), list), title
