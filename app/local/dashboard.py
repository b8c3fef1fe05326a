"""The service's Grafana dashboard, built with grafanalib from the metrics contract.

`python -m app.local.dashboard` (`make dashboard`) writes app/local/grafana/offers-dashboard.json;
a unit test fails when that file differs from a fresh render, so it cannot go stale.

Every query is plain PromQL with fixed `[1m]` windows (not Grafana's `$__rate_interval`), so
the tests run the very same strings against a real Prometheus. Panels read from a dashboard
variable `DS_PROMETHEUS` of type datasource (no `__inputs`): left unset in the file, Grafana
picks its default Prometheus data source, whether the file is imported in the UI, posted to
the API or provisioned from disk; the variable's picker in the header switches it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The encoder grafanalib's own writer uses (turns its objects into JSON on the way out).
from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard, GridPos, Target, Template, Templating, Time, TimeSeries

from app.contract import metrics as spec
from app.contract.metrics import PROMETHEUS_PREFIX, MetricSpec

DEFAULT_OUT = Path(__file__).resolve().parent / "grafana" / "offers-dashboard.json"
UID = "dynamic-offers"  # fixed, so a re-import replaces the dashboard instead of adding one
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
# Six samples at Ray's usual 10 s scrape interval: rate() needs two, and a fixed window is
# what raw Prometheus (the tests) understands.
WINDOW = "1m"
# Serve's own gauge (not ours, so not in the contract): healthy replicas per deployment.
SERVE_REPLICA_HEALTHY = PROMETHEUS_PREFIX + "serve_deployment_replica_healthy"

PANEL_WIDTH = 12  # two panels per row of Grafana's 24-column grid
PANEL_HEIGHT = 8


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    min_value: int | None = None
    max_value: int | None = None
    stepped: bool = False  # a state or a count: drawn as steps, not interpolated
    value_texts: tuple[tuple[str, str], ...] = ()  # (value, text) shown instead of the value


def _rate(s: MetricSpec, suffix: str = "", selector: str = "") -> str:
    return f"rate({s.exported}{suffix}{selector}[{WINDOW}])"


def _quantile(q: float, s: MetricSpec, by: tuple[str, ...] = ()) -> str:
    labels = ", ".join((*by, "le"))
    return f"histogram_quantile({q}, sum by ({labels}) ({_rate(s, '_bucket')}))"


def _mean(s: MetricSpec) -> str:
    return f"sum({_rate(s, '_sum')}) / sum({_rate(s, '_count')})"


def panel_specs() -> tuple[PanelSpec, ...]:
    """Every panel, in dashboard order (left to right, top to bottom)."""
    answers, latency = spec.ANSWERS, spec.LOGIN_LATENCY
    # Every answer the online path could not personalize, whichever tier then answered.
    fallbacks = _rate(answers, selector='{outcome!="personalized"}')
    cache_hits = _rate(spec.FEATURE_CACHE, selector='{result="hit"}')
    return (
        PanelSpec(
            "Logins/s by outcome",
            "reqps",
            (
                Query(
                    f"sum by (outcome, reason) ({_rate(answers)})",
                    "{{outcome}} ({{reason}})",
                ),
            ),
            "Answers per second: personalized, precomputed (the last batch run's offer) or "
            "fallback (the default offer), with the online path's failure reason.",
        ),
        PanelSpec(
            "Login latency p50 / p95 / p99",
            "ms",
            tuple(Query(_quantile(q, latency), f"p{round(q * 100)}") for q in (0.5, 0.95, 0.99)),
            "From a login's arrival at the supervisor to its answer, all outcomes.",
        ),
        PanelSpec(
            "Login latency p95 by version",
            "ms",
            (Query(_quantile(0.95, latency, ("game", "version")), "{{game}} {{version}}"),),
            "Compares the versions the split serves (e.g. stable against canary).",
        ),
        PanelSpec(
            "Fallback share by reason",
            "percentunit",
            (
                Query(
                    f"sum by (reason) ({fallbacks})"
                    f" / ignoring (reason) group_left () sum({_rate(answers)})",
                    "{{reason}}",
                ),
                # `or vector(0)`: a flat 0 while no login falls back, rather than no data.
                Query(
                    f"(sum({fallbacks}) or vector(0)) / sum({_rate(answers)})",
                    "all reasons",
                ),
            ),
            "Answers the online path could not personalize (precomputed or default offer), "
            "as a share of all answers, by reason and in total.",
            min_value=0,
        ),
        PanelSpec(
            "Members answered per login",
            "short",
            (
                Query(_mean(spec.MEMBERS_ANSWERED), "mean"),
                Query(_quantile(0.5, spec.MEMBERS_ANSWERED), "p50"),
                Query(_quantile(0.05, spec.MEMBERS_ANSWERED), "p5 (worst 5%)"),
            ),
            "Members that answered in time, per scored login.",
            min_value=0,
        ),
        PanelSpec(
            "Member latency p95 by member",
            "ms",
            (Query(_quantile(0.95, spec.MEMBER_LATENCY, ("member",)), "{{member}}"),),
            "From a fan-out round's start to the member's answer.",
        ),
        PanelSpec(
            "Member missing/s by member and reason",
            "reqps",
            (
                Query(
                    f"sum by (member, reason) ({_rate(spec.MEMBER_MISSING)})",
                    "{{member}} {{reason}}",
                ),
            ),
            "Logins a member did not answer for: timeout, bad output or an error type.",
        ),
        PanelSpec(
            "Coalesced batch size: logins per round (mean)",
            "short",
            (Query(_mean(spec.BATCH_LOGINS), "logins"),),
            "Logins scored together in one fan-out round.",
            min_value=0,
        ),
        PanelSpec(
            "Coalesced batch size: rows per round (mean)",
            "short",
            (Query(_mean(spec.BATCH_ROWS), "rows"),),
            "Candidate rows (logins x offers) scored in one fan-out round.",
            min_value=0,
        ),
        PanelSpec(
            "Feature cache hit ratio",
            "percentunit",
            (
                Query(
                    f"sum({cache_hits}) / sum({_rate(spec.FEATURE_CACHE)})",
                    "hit ratio",
                ),
            ),
            "Feature rows found in the supervisor's cache, of all looked up.",
            min_value=0,
            max_value=1,
        ),
        PanelSpec(
            "DynamoDB read latency p95 by operation",
            "ms",
            (
                Query(
                    _quantile(0.95, spec.DYNAMODB_READ, ("operation",)),
                    "{{operation}}",
                ),
            ),
            "GetItem and BatchGetItem, successful and failed reads together.",
        ),
        PanelSpec(
            "DynamoDB reads/s by operation and outcome",
            "reqps",
            (
                Query(
                    f"sum by (operation, outcome) ({_rate(spec.DYNAMODB_READ, '_count')})",
                    "{{operation}} {{outcome}}",
                ),
            ),
            "Reads per second; outcome error counts failed reads.",
        ),
        PanelSpec(
            "Breaker state by replica",
            "short",
            (
                Query(
                    f"max by (application, deployment, replica) ({spec.BREAKER_OPEN.exported})",
                    "{{replica}}",
                ),
            ),
            "DynamoDB circuit breaker of each supervisor replica: 0 closed, 0.5 half-open, 1 open.",
            min_value=0,
            max_value=1,
            stepped=True,
            # The gauge's values (app.serving.telemetry.BREAKER_VALUES).
            value_texts=(("0", "closed"), ("0.5", "half-open"), ("1", "open")),
        ),
        PanelSpec(
            "Replicas per deployment",
            "short",
            (
                Query(
                    f"sum by (application, deployment) ({SERVE_REPLICA_HEALTHY})",
                    "{{application}} {{deployment}}",
                ),
            ),
            "Healthy replicas, from Ray Serve's own controller metric.",
            min_value=0,
            stepped=True,
        ),
        PanelSpec(
            "Version split: logins/s by assigned and answered version",
            "reqps",
            (
                Query(
                    f"sum by (assigned, answered, reason) ({_rate(spec.VERSION_ROUTED)})",
                    "{{assigned}} -> {{answered}} ({{reason}})",
                ),
            ),
            "The router's choices; reason says why the answering version differs "
            "(none | unavailable | failed).",
        ),
    )


def panels() -> list[tuple[str, list[str]]]:
    """(title, PromQL expressions) of every panel, for tests that run them in Prometheus."""
    return [(p.title, [q.expr for q in p.queries]) for p in panel_specs()]


def _value_mappings(texts: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    if not texts:
        return []
    options = {value: {"index": i, "text": text} for i, (value, text) in enumerate(texts)}
    return [{"type": "value", "options": options}]


def _timeseries(p: PanelSpec, index: int) -> TimeSeries:
    targets = [
        Target(expr=q.expr, legendFormat=q.legend, refId=chr(ord("A") + i), datasource=DATASOURCE)
        for i, q in enumerate(p.queries)
    ]
    return TimeSeries(
        title=p.title,
        description=p.description,
        dataSource=DATASOURCE,
        targets=targets,
        unit=p.unit,
        valueMin=p.min_value,
        valueMax=p.max_value,
        lineInterpolation="stepAfter" if p.stepped else "linear",
        mappings=_value_mappings(p.value_texts),
        tooltipMode="multi",
        gridPos=GridPos(
            h=PANEL_HEIGHT,
            w=PANEL_WIDTH,
            x=(index % 2) * PANEL_WIDTH,
            y=(index // 2) * PANEL_HEIGHT,
        ),
    )


def dashboard() -> Any:
    """The grafanalib Dashboard (untyped library: Any at this boundary)."""
    datasource = Template(
        name="DS_PROMETHEUS",
        label="Prometheus",
        query="prometheus",
        type="datasource",
    )
    return Dashboard(
        title="Dynamic offers",
        uid=UID,
        description="The offers service on Ray Serve: traffic, latency, ensemble members, "
        "coalescing, features, DynamoDB, breakers, replicas and the version split.",
        tags=["dynamic-offers", "ray-serve"],
        timezone="browser",
        time=Time("now-30m", "now"),
        refresh="10s",
        templating=Templating(list=[datasource]),
        panels=[_timeseries(p, i) for i, p in enumerate(panel_specs())],
    ).auto_panel_ids()


def render() -> str:
    """The dashboard's JSON: sorted keys, 2-space indent, trailing newline, no timestamps."""
    document = dashboard().to_json_data()
    return json.dumps(document, sort_keys=True, indent=2, cls=DashboardEncoder) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
