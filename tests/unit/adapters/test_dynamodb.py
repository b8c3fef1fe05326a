"""The DynamoDB feature store against in-process fake clients: concurrency, deadlines,
warm-up and shutdown. (Against a real dynalite: tests/integration/adapters.)"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from app.adapters.dynamodb import PARTITION_KEY, WARM_UP_PLAYER, FeatureStore, player_key
from app.config.settings import Settings
from app.core.online.fanout import Fanout
from app.core.online.feature_source import FeatureStoreUnavailable
from app.core.online.offer_service import FallbackReason, OfferQuery, OfferService
from tests.support import FakeMember, small_manifest, small_schema

pytestmark = pytest.mark.unit

GAME = "test-game"
TABLE = "player-features-unit"


class FakeClient:
    """boto3-shaped: every call runs `hook` first (block, sleep or fail), then answers."""

    def __init__(self, hook=None) -> None:
        self.hook = hook or (lambda: None)
        self.calls: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()
        self.running = 0
        self.max_running = 0

    def _enter(self, name: str, keys: list[str]) -> None:
        with self._lock:
            self.calls.append((name, keys))
            self.running += 1
            self.max_running = max(self.max_running, self.running)

    def _leave(self) -> None:
        with self._lock:
            self.running -= 1

    def get_item(self, **kwargs):
        key = kwargs["Key"][PARTITION_KEY]["S"]
        self._enter("get_item", [key])
        try:
            self.hook()
            return {"Item": item(key)}
        finally:
            self._leave()

    def batch_get_item(self, **kwargs):
        keys = [k[PARTITION_KEY]["S"] for k in kwargs["RequestItems"][TABLE]["Keys"]]
        self._enter("batch_get_item", keys)
        try:
            self.hook()
            return {"Responses": {TABLE: [item(k) for k in keys]}}
        finally:
            self._leave()


def item(key: str) -> dict:
    return {PARTITION_KEY: {"S": key}, "level": {"N": "7"}}


def store(client, **overrides) -> FeatureStore:
    settings = Settings(
        dynamodb_table=TABLE,
        **{"feature_cache_ttl_s": 0, "dynamodb_batch_reads": False, **overrides},
    )
    return FeatureStore(settings, small_schema(), GAME, client=client)


def test_concurrent_get_items_run_at_once_not_one_after_another():
    n = 8
    # Each read waits until all n are inside the client at the same time. Reads made one
    # at a time (a lock held across the call) would break the barrier and fail the test.
    barrier = threading.Barrier(n, timeout=10)
    client = FakeClient(hook=barrier.wait)
    features = store(client)

    async def reads():
        return await asyncio.gather(*(features.player_row(f"p{i}") for i in range(n)))

    rows = asyncio.run(reads())
    assert client.max_running == n
    assert all(row is not None and row[0] == 7 for row in rows)
    features.close()


def test_batched_reads_run_up_to_max_batches_in_flight_at_once():
    barrier = threading.Barrier(4, timeout=10)
    client = FakeClient(hook=barrier.wait)
    features = store(client, dynamodb_batch_reads=True, dynamodb_max_batches_in_flight=4)

    async def reads():
        calls = []
        for i in range(4):  # one login per loop turn: each becomes its own BatchGetItem
            calls.append(asyncio.ensure_future(features.player_row(f"p{i}")))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return await asyncio.gather(*calls)

    rows = asyncio.run(reads())
    assert client.max_running == 4
    assert [name for name, _ in client.calls] == ["batch_get_item"] * 4
    assert all(row is not None for row in rows)
    features.close()


@pytest.mark.parametrize("batch_reads", [False, True], ids=["GetItem", "BatchGetItem"])
def test_a_store_slower_than_the_budget_gives_a_flagged_answer_at_the_budget(batch_reads):
    """A table that answers after 2 s, a 300 ms budget: flagged, in about 300 ms."""
    client = FakeClient(hook=lambda: time.sleep(2.0))
    manifest = small_manifest(weights=(1.0,))
    member = FakeMember("m0", 1.0, lambda m: np.full(m.shape[0], 0.5))
    features = store(client, dynamodb_batch_reads=batch_reads)
    service = OfferService(manifest, features, Fanout([member]), request_budget_ms=300, quorum=0.5)
    started = time.monotonic()
    answer = asyncio.run(service.recommend(OfferQuery(game=GAME, player_id="p1")))
    waited = time.monotonic() - started
    assert answer.fallback_reason == FallbackReason.FEATURE_STORE_UNAVAILABLE
    assert 0.29 <= waited < 2.0  # the budget ended it, not the store's answer
    assert member.calls == []
    features.close()


def test_warm_up_makes_one_real_call_and_survives_a_failing_store():
    client = FakeClient()
    features = store(client)
    assert asyncio.run(features.warm_up()) is True
    assert client.calls == [("get_item", [player_key(GAME, WARM_UP_PLAYER)])]

    def down():
        from botocore.exceptions import EndpointConnectionError

        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    broken = store(FakeClient(hook=down), dynamodb_breaker_fail_max=1)
    assert asyncio.run(broken.warm_up()) is False
    assert broken.breaker_state == "closed"  # warm-up does not count against the table
    features.close()
    broken.close()


def test_closed_store_refuses_reads_as_unavailable_not_as_an_error():
    features = store(FakeClient())
    features.close()
    with pytest.raises(FeatureStoreUnavailable, match="closed"):
        asyncio.run(features.player_row("p1"))


def test_a_batched_read_caught_by_shutdown_is_unavailable_not_an_error():
    release = threading.Event()
    client = FakeClient(hook=lambda: release.wait(10))
    features = store(client, dynamodb_batch_reads=True)

    async def read_then_close():
        read = asyncio.ensure_future(features.player_row("p1"))
        for _ in range(1000):  # until the BatchGetItem is in flight (at most 10 s)
            if client.running:
                break
            await asyncio.sleep(0.01)
        features.close()
        try:
            return await read
        finally:
            release.set()

    with pytest.raises(FeatureStoreUnavailable, match="closed"):
        asyncio.run(asyncio.wait_for(read_then_close(), 10))


def test_cached_row_answers_from_memory_only_after_a_read():
    client = FakeClient()
    features = store(client, feature_cache_ttl_s=30)
    assert features.cached_row("p1") is None  # never read: no I/O to find out
    row = asyncio.run(features.player_row("p1"))
    cached = features.cached_row("p1", {"platform": "ios"})
    assert cached is not None and cached[0] == row[0] == 7
    assert cached[2] == 1.0  # the request's override applies to the cached item too
    assert len(client.calls) == 1
    features.close()
    assert features.cached_row("p1") is None  # closed: nothing is served any more


@pytest.mark.parametrize("batch_reads", [False, True], ids=["GetItem", "BatchGetItem"])
def test_a_hot_player_missing_the_cache_is_read_once_for_all_concurrent_logins(batch_reads):
    release = threading.Event()
    client = FakeClient(hook=lambda: release.wait(10))
    features = store(client, dynamodb_batch_reads=batch_reads, feature_cache_ttl_s=30)

    async def logins():
        first = [asyncio.ensure_future(features.player_row("hot")) for _ in range(20)]
        # Spread over several loop turns (several batches, if batching), all while the first
        # read is still in DynamoDB.
        for _ in range(5):
            first.append(asyncio.ensure_future(features.player_row("hot")))
            await asyncio.sleep(0.01)
        # One login giving up must not cancel the read the others wait on.
        first[0].cancel()
        release.set()
        rows = await asyncio.gather(*first[1:])
        # Later logins are served from the cache.
        rows.append(await features.player_row("hot"))
        return rows

    rows = asyncio.run(logins())
    assert len(client.calls) == 1, client.calls
    assert all(row is not None and row[0] == 7 for row in rows)
    features.close()
