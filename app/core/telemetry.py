"""What the service reports about its work, as calls on a plain interface.

The core calls these methods at the points where it knows the facts (an answer, a round's
members, a cache lookup, a read); app.serving.telemetry turns them into Ray Serve metrics
(names in app.contract.metrics). Tests and the in-process peers use NoTelemetry or a
recording fake, so the business logic never imports Ray.
"""

from __future__ import annotations

from typing import Protocol


class Telemetry(Protocol):
    def answer(self, outcome: str, reason: str, latency_ms: float) -> None:
        """One login answered: outcome `personalized`, `precomputed` or `fallback`, reason
        (`none` if personalized), and its time inside the service."""

    def members_answered(self, count: int) -> None:
        """How many members' scores a scored login was aggregated from."""

    def member_latency(self, member: str, latency_ms: float) -> None:
        """A member's answer arrived this long after its round started (once per round)."""

    def member_missing(self, member: str, reason: str) -> None:
        """A login went without this member: timeout, bad_output, weighted_out or an error."""

    def batch(self, logins: int, rows: int) -> None:
        """A coalesced fan-out round left with this many logins and candidate rows."""

    def cache_lookup(self, hit: bool) -> None:
        """A login's features were (not) found in the replica's cache."""

    def dynamodb_read(self, operation: str, latency_ms: float, ok: bool) -> None:
        """One GetItem or BatchGetItem call, and whether it succeeded."""

    def breaker(self, state: str) -> None:
        """The feature store's circuit breaker state: closed, half_open or open."""


class NoTelemetry:
    """Reports nothing (unit tests, the benchmark's in-process peers)."""

    def answer(self, outcome: str, reason: str, latency_ms: float) -> None:
        pass

    def members_answered(self, count: int) -> None:
        pass

    def member_latency(self, member: str, latency_ms: float) -> None:
        pass

    def member_missing(self, member: str, reason: str) -> None:
        pass

    def batch(self, logins: int, rows: int) -> None:
        pass

    def cache_lookup(self, hit: bool) -> None:
        pass

    def dynamodb_read(self, operation: str, latency_ms: float, ok: bool) -> None:
        pass

    def breaker(self, state: str) -> None:
        pass
