"""The service's custom metrics: names, label keys and buckets, in one place.

A contract between the replicas (app.serving.telemetry records them with ray.serve.metrics),
the Grafana dashboard (app.local.dashboard) and the tests that query Prometheus. Ray exports
each one on the node's metrics port with a `ray_` prefix; Serve adds `application`,
`deployment` and `replica` labels to every series. Counter names end in `_total`, so Ray
exports them under exactly that name (no extra gauge copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

PROMETHEUS_PREFIX = "ray_"


class Kind(StrEnum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    GAUGE = "gauge"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Kind
    description: str
    tag_keys: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()

    @property
    def exported(self) -> str:
        """The series name in Prometheus (histograms add _bucket, _sum and _count)."""
        return PROMETHEUS_PREFIX + self.name


# Ray 2.60 exports a histogram's `_sum` from bucket midpoints, not from the observed values
# (ray/_private/telemetry/open_telemetry_metric_recorder.py). Counts of things (members,
# logins) therefore get boundaries at half-integers: each small count has a bucket whose
# midpoint is the count itself, so `_sum / _count` is exact for them. Latency sums, and so
# latency means, are approximate; quantiles come from the buckets either way.
LATENCY_MS_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000)
MEMBER_COUNT_BUCKETS = tuple(float(n) + 0.5 for n in range(0, 25))  # 0.5, 1.5, ... 24.5
BATCH_LOGIN_BUCKETS = (0.5, 1.5, 2.5, 3.5, 4.5, 6.5, 8.5, 12.5, 16.5, 24.5, 32.5, 48.5, 64.5)
BATCH_ROW_BUCKETS = (8, 16, 32, 64, 128, 256, 384, 512, 768, 1024)

# Answers by outcome: "personalized"; or, when the online path failed, "precomputed" (the last
# batch run's offer) or "fallback" (the default offer), with the reason ("none" when
# personalized).
ANSWERS = MetricSpec(
    "offers_answers_total",
    Kind.COUNTER,
    "Offer answers by outcome (personalized | precomputed | fallback) and fallback reason",
    ("game", "version", "outcome", "reason"),
)
LOGIN_LATENCY = MetricSpec(
    "offers_login_latency_ms",
    Kind.HISTOGRAM,
    "Time from a login's arrival at the supervisor to its answer, by outcome",
    ("game", "version", "outcome"),
    LATENCY_MS_BUCKETS,
)
MEMBERS_ANSWERED = MetricSpec(
    "offers_members_answered",
    Kind.HISTOGRAM,
    "Members that answered in time, per scored login",
    ("game", "version"),
    MEMBER_COUNT_BUCKETS,
)
MEMBER_LATENCY = MetricSpec(
    "offers_member_latency_ms",
    Kind.HISTOGRAM,
    "Time from a fan-out round's start to a member's answer",
    ("game", "version", "member"),
    LATENCY_MS_BUCKETS,
)
MEMBER_MISSING = MetricSpec(
    "offers_member_missing_total",
    Kind.COUNTER,
    "Logins a member did not answer for, by reason (timeout, bad_output, error type)",
    ("game", "version", "member", "reason"),
)
BATCH_LOGINS = MetricSpec(
    "offers_batch_logins",
    Kind.HISTOGRAM,
    "Logins per coalesced fan-out round",
    ("game", "version"),
    BATCH_LOGIN_BUCKETS,
)
BATCH_ROWS = MetricSpec(
    "offers_batch_rows",
    Kind.HISTOGRAM,
    "Candidate rows per coalesced fan-out round",
    ("game", "version"),
    BATCH_ROW_BUCKETS,
)
FEATURE_CACHE = MetricSpec(
    "offers_feature_cache_total",
    Kind.COUNTER,
    "Feature rows looked up in the supervisor's cache, by result (hit | miss)",
    ("game", "version", "result"),
)
DYNAMODB_READ = MetricSpec(
    "offers_dynamodb_read_ms",
    Kind.HISTOGRAM,
    "DynamoDB read latency by operation (GetItem | BatchGetItem) and outcome (ok | error)",
    ("game", "version", "operation", "outcome"),
    LATENCY_MS_BUCKETS,
)
BREAKER_OPEN = MetricSpec(
    "offers_breaker_open",
    Kind.GAUGE,
    "DynamoDB circuit breaker of this replica: 0 closed, 0.5 half-open, 1 open",
    ("game", "version"),
)
VERSION_ROUTED = MetricSpec(
    "offers_version_routed_total",
    Kind.COUNTER,
    "Logins routed by the version split: the version assigned, the version that answered "
    "(none if no version did), and why (none | unavailable | failed | timeout | refused)",
    ("game", "assigned", "answered", "reason"),
)

ALL = (
    ANSWERS,
    LOGIN_LATENCY,
    MEMBERS_ANSWERED,
    MEMBER_LATENCY,
    MEMBER_MISSING,
    BATCH_LOGINS,
    BATCH_ROWS,
    FEATURE_CACHE,
    DYNAMODB_READ,
    BREAKER_OPEN,
    VERSION_ROUTED,
)
