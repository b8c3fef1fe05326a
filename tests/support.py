"""Hand-built schemas, manifests and fakes for tests that need no trained artifacts, and the
few helpers the cluster tests share (waiting on the service, measuring what it answers)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from app.contract.feature_schema import FeatureSchema, FeatureSpec
from app.contract.manifest import Manifest, MemberEntry, Offer
from app.core.online.fanout import MemberRef
from app.core.online.feature_source import FeatureStoreUnavailable


def small_schema() -> FeatureSchema:
    return FeatureSchema(
        version="fs-test",
        player_features=(
            FeatureSpec(name="level", kind="numeric", default=1.0),
            FeatureSpec(name="spend_28d", kind="numeric", default=0.0),
            FeatureSpec(
                name="platform", kind="category", default="android", categories=("android", "ios")
            ),
        ),
        offer_features=("price", "discount"),
    )


def offer(offer_id: str, price: float, discount: float, prior: float) -> Offer:
    return Offer(
        offer_id=offer_id,
        item=f"item {offer_id}",
        category="gems",
        price=price,
        discount=discount,
        features=[price, discount],
        prior_propensity=prior,
    )


def member(name: str, weight: float, training: dict | None = None) -> MemberEntry:
    return MemberEntry(
        name=name,
        framework="xgboost",
        estimator="XGBClassifier",
        artifact=f"{name}.ubj",
        sha256="0" * 64,
        weight=weight,
        auc=0.7,
        training=training or {},
    )


def small_manifest(weights: tuple[float, ...] = (0.5, 0.3, 0.2)) -> Manifest:
    return Manifest(
        game="test-game",
        version="v-test",
        profile="test",
        training_config_hash="abc",
        feature_schema=small_schema(),
        offers=[
            offer("cheap", 0.99, 0.0, 0.10),
            offer("mid", 4.99, 0.2, 0.05),
            offer("big", 19.99, 0.5, 0.01),
        ],
        fallback_offer_id="mid",
        members=[member(f"m{i}", w) for i, w in enumerate(weights)],
        ensemble_auc=0.72,
        oracle_auc=0.8,
        holdout_rows=1000,
    )


class FakeFeatureStore:
    """Serves rows from a dict; can be told to fail like an unreachable DynamoDB."""

    def __init__(self, schema: FeatureSchema, players: dict[str, dict], fail: bool = False):
        self._schema = schema
        self._players = players
        self.fail = fail

    def cached_row(self, player_id, overrides=None):
        return None  # no cache: every login reads

    async def player_row(self, player_id, overrides=None):
        if self.fail:
            raise FeatureStoreUnavailable("EndpointConnectionError: connection refused")
        record = self._players.get(player_id)
        if record is None:
            return None
        return self._schema.encode_record({**record, **(overrides or {})})


class FakeMember:
    """A one-member group whose score is a fixed function of the rows, optionally slow or
    broken (the fn's output gets the group's leading member axis)."""

    def __init__(self, name, weight, fn, delay_s: float = 0.0, error: Exception | None = None):
        self.name = name
        self.weight = weight
        self.members = (MemberRef(name, weight),)
        self._fn = fn
        self._delay_s = delay_s
        self._error = error
        self.calls: list[np.ndarray] = []
        self.cancelled = False

    async def score(self, matrix: np.ndarray) -> np.ndarray:
        self.calls.append(matrix)
        try:
            await asyncio.sleep(self._delay_s)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self._error is not None:
            raise self._error
        return np.asarray(self._fn(matrix), dtype=np.float64)[np.newaxis]


class ManualClock:
    """A clock the test moves by hand (`clock.now += 2.5`): time-based code without sleeps."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class HostStalls:
    """When this process was not run: a thread sleeps `interval_s` at a time, and each wake
    more than `slack_s` late is recorded as a stall, the interval it overslept.

    A thread, not a task on the event loop: a service that blocks its own loop with Python
    code or a call that drops the GIL (a synchronous socket, a sleep) leaves this thread on
    time (the GIL is handed over every 5 ms, well under `slack_s`), so such a fault still
    counts against the service. What it does count: the host running nothing of this
    process (a SIGSTOP of 0.4 s reads as 0.40 s), and whatever holds the GIL for longer
    than `slack_s` (a full garbage collection, a long C call). It sees only this process:
    a service in other processes may be starved while this one runs, so a test that times
    such a service keeps a raw bound beside the discounted one.
    """

    def __init__(self, interval_s: float = 0.005, slack_s: float = 0.02) -> None:
        self._interval_s = interval_s
        self._slack_s = slack_s
        self._lock = threading.Lock()
        self._stalls: list[tuple[float, float]] = []  # (from, to), on time.perf_counter
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-stalls", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            time.sleep(self._interval_s)
            woke = time.perf_counter()
            if woke - started - self._interval_s > self._slack_s:
                with self._lock:
                    self._stalls.append((started + self._interval_s, woke))

    def within(self, start: float, end: float) -> float:
        """Stalled seconds inside [start, end] (time.perf_counter): only the part of each
        stall that overlaps the window, so a stall across two logins is not counted twice."""
        with self._lock:
            return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self._stalls)

    def __enter__(self) -> HostStalls:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def wait_until(
    predicate: Callable[[], Any], what: str, timeout_s: float = 60.0, poll_s: float = 0.25
) -> Any:
    """The predicate's first truthy value, polled; AssertionError naming `what` after
    timeout_s (the service's state changes on its own clock: Serve replaces a replica, a
    router reads a new weight)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen after {timeout_s}s")
        time.sleep(poll_s)


def answered_per_s(
    base_url: str, game: str, players: int, callers: int, seconds: float = 3.0
) -> float:
    """Logins per second an application answers 200 to `callers` sending back to back, on
    this host now: its capacity, members' scoring and the edge included. A test that runs
    load beside a fault offers a share of it, so a slower host gets fewer logins per second,
    never a looser check."""
    from loadtest.harness.open_loop import Caller, closed_loop, random_players

    shots = asyncio.run(
        closed_loop(Caller(base_url, game), callers, seconds, random_players(players))
    )
    answered = [s for s in shots if s.status == 200]
    assert len(answered) >= 10, f"the application answers: {shots[:5]}"
    return len(answered) / seconds
