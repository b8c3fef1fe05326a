"""The core's Telemetry as Ray Serve metrics (ray.serve.metrics), names from app.contract.metrics.

Created inside a replica (never at import time). Serve adds the application, deployment and
replica labels itself; this adds game and version as default tags, so every series of one
ensemble version can be told apart from another's in the same cluster.
"""

from __future__ import annotations

from typing import Any

from ray.serve import metrics

from app.contract import metrics as spec
from app.contract.metrics import Kind, MetricSpec

# The breaker gauge's values: 0 closed, 1 open; half-open (one trial read allowed) between.
BREAKER_VALUES = {"closed": 0.0, "half-open": 0.5, "open": 1.0}


def _tags(s: MetricSpec, kind: Kind, default_tags: dict[str, str]) -> dict[str, str]:
    if s.kind is not kind:
        raise TypeError(f"{s.name} is a {s.kind}, not a {kind}")
    return {k: v for k, v in default_tags.items() if k in s.tag_keys}


def _keys(s: MetricSpec) -> Any:
    # Ray annotates tag_keys as tuple[str] (a 1-tuple); any tuple of names is what it takes.
    return s.tag_keys


def counter(s: MetricSpec, default_tags: dict[str, str]) -> metrics.Counter:
    tags = _tags(s, Kind.COUNTER, default_tags)
    metric = metrics.Counter(s.name, description=s.description, tag_keys=_keys(s))
    metric.set_default_tags(tags)
    return metric


def histogram(s: MetricSpec, default_tags: dict[str, str]) -> metrics.Histogram:
    tags = _tags(s, Kind.HISTOGRAM, default_tags)
    metric = metrics.Histogram(
        s.name, description=s.description, boundaries=list(s.boundaries), tag_keys=_keys(s)
    )
    metric.set_default_tags(tags)
    return metric


def gauge(s: MetricSpec, default_tags: dict[str, str]) -> metrics.Gauge:
    tags = _tags(s, Kind.GAUGE, default_tags)
    metric = metrics.Gauge(s.name, description=s.description, tag_keys=_keys(s))
    metric.set_default_tags(tags)
    return metric


class SupervisorTelemetry:
    """Telemetry of one ensemble version's supervisor replica."""

    def __init__(self, game: str, version: str) -> None:
        tags = {"game": game, "version": version}
        self._answers = counter(spec.ANSWERS, tags)
        self._latency = histogram(spec.LOGIN_LATENCY, tags)
        self._members_answered = histogram(spec.MEMBERS_ANSWERED, tags)
        self._member_latency = histogram(spec.MEMBER_LATENCY, tags)
        self._member_missing = counter(spec.MEMBER_MISSING, tags)
        self._batch_logins = histogram(spec.BATCH_LOGINS, tags)
        self._batch_rows = histogram(spec.BATCH_ROWS, tags)
        self._cache = counter(spec.FEATURE_CACHE, tags)
        self._dynamodb = histogram(spec.DYNAMODB_READ, tags)
        self._breaker = gauge(spec.BREAKER_OPEN, tags)

    def answer(self, outcome: str, reason: str, latency_ms: float) -> None:
        self._answers.inc(tags={"outcome": outcome, "reason": reason})
        self._latency.observe(latency_ms, tags={"outcome": outcome})

    def members_answered(self, count: int) -> None:
        self._members_answered.observe(count)

    def member_latency(self, member: str, latency_ms: float) -> None:
        self._member_latency.observe(latency_ms, tags={"member": member})

    def member_missing(self, member: str, reason: str) -> None:
        self._member_missing.inc(tags={"member": member, "reason": reason})

    def batch(self, logins: int, rows: int) -> None:
        self._batch_logins.observe(logins)
        self._batch_rows.observe(rows)

    def cache_lookup(self, hit: bool) -> None:
        self._cache.inc(tags={"result": "hit" if hit else "miss"})

    def dynamodb_read(self, operation: str, latency_ms: float, ok: bool) -> None:
        self._dynamodb.observe(
            latency_ms, tags={"operation": operation, "outcome": "ok" if ok else "error"}
        )

    def breaker(self, state: str) -> None:
        # Set on every report, not on change: Ray drops a gauge series that is not set again
        # within two export intervals (the supervisor also reports it on a timer).
        self._breaker.set(BREAKER_VALUES.get(state, 1.0))


class RouterTelemetry:
    """The version split's choices, from the game's router replicas."""

    def __init__(self, game: str) -> None:
        self._routed = counter(spec.VERSION_ROUTED, {"game": game})

    def routed(self, assigned: str, answered: str, reason: str) -> None:
        self._routed.inc(tags={"assigned": assigned, "answered": answered, "reason": reason})
