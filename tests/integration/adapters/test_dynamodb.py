"""Feature reads against dynalite: coalesced BatchGetItem, TTL cache, unavailable store."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from app.adapters.dynamodb import PARTITION_KEY, FeatureStore, player_key
from app.config.settings import Settings
from app.contract.manifest import load_manifest
from app.core.online.feature_source import FeatureStoreUnavailable
from app.local.dynalite import local_client
from app.local.processes import free_port
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_TABLE
from tests.support import HostStalls

pytestmark = pytest.mark.integration


class CountingClient:
    """The real boto3 client, with a tally of the DynamoDB calls made through it."""

    def __init__(self, client, unprocess: set[str] | None = None) -> None:
        self._client = client
        self.calls: list[tuple[str, int]] = []
        self._unprocess = unprocess or set()

    def get_item(self, **kwargs):
        self.calls.append(("get_item", 1))
        return self._client.get_item(**kwargs)

    def batch_get_item(self, **kwargs):
        request = kwargs["RequestItems"][TEST_TABLE]
        self.calls.append(("batch_get_item", len(request["Keys"])))
        response = self._client.batch_get_item(**kwargs)
        if self._unprocess:
            # What DynamoDB does under throttling: some keys come back unprocessed.
            held = [k for k in request["Keys"] if k[PARTITION_KEY]["S"] in self._unprocess]
            response["Responses"][TEST_TABLE] = [
                i
                for i in response["Responses"][TEST_TABLE]
                if i[PARTITION_KEY]["S"] not in self._unprocess
            ]
            response["UnprocessedKeys"] = {TEST_TABLE: {"Keys": held}}
        return response


def settings(**overrides) -> Settings:
    # Explicit, so the environment the Serve fixture exports does not leak in.
    defaults = {"feature_cache_ttl_s": 30.0, "dynamodb_batch_reads": True}
    return Settings(dynamodb_table=TEST_TABLE, **{**defaults, **overrides})


def store_for(tiny_version_dir, client, **overrides) -> FeatureStore:
    schema = load_manifest(tiny_version_dir).feature_schema
    return FeatureStore(settings(**overrides), schema, TEST_GAME, client=client)


def expected_row(tiny_version_dir, client, pid):
    schema = load_manifest(tiny_version_dir).feature_schema
    item = client.get_item(
        TableName=TEST_TABLE, Key={PARTITION_KEY: {"S": player_key(TEST_GAME, pid)}}
    ).get("Item")
    return None if item is None else schema.decode_item(item)


async def read_all(store, ids):
    return await asyncio.gather(*(store.player_row(p) for p in ids), return_exceptions=True)


def test_concurrent_logins_share_batch_reads_and_match_single_reads(
    tiny_version_dir, dynalite_server
):
    raw = dynalite_server.client()
    client = CountingClient(raw)
    store = store_for(tiny_version_dir, client, feature_cache_ttl_s=0)
    ids = [player_id(i) for i in range(40)] + ["no-such-player", player_id(3)]
    rows = asyncio.run(read_all(store, ids))
    for pid, row in zip(ids, rows, strict=True):
        expected = expected_row(tiny_version_dir, raw, pid)
        if expected is None:
            assert row is None, pid
        else:
            np.testing.assert_array_equal(row, expected)
    assert {name for name, _ in client.calls} == {"batch_get_item"}
    # 42 logins (41 distinct players) in a handful of requests, each key asked once per batch.
    assert len(client.calls) <= 5
    assert sum(keys for _, keys in client.calls) <= 41


def test_cache_serves_known_players_and_rereads_unknown_ones(tiny_version_dir, dynalite_server):
    client = CountingClient(dynalite_server.client())
    store = store_for(tiny_version_dir, client, dynamodb_batch_reads=False)

    async def twice():
        first = await store.player_row(player_id(1))
        second = await store.player_row(player_id(1))
        await store.player_row("no-such-player")
        await store.player_row("no-such-player")
        return first, second

    first, second = asyncio.run(twice())
    np.testing.assert_array_equal(first, second)
    assert client.calls == [("get_item", 1)] * 3  # one for player 1, two for the unknown


def test_cached_rows_still_apply_request_overrides(tiny_version_dir, dynalite_server):
    client = CountingClient(dynalite_server.client())
    store = store_for(tiny_version_dir, client)
    schema = load_manifest(tiny_version_dir).feature_schema

    async def both():
        plain = await store.player_row(player_id(2))
        ios = await store.player_row(player_id(2), {"platform": "ios"})
        android = await store.player_row(player_id(2), {"platform": "android"})
        return plain, ios, android

    plain, ios, android = asyncio.run(both())
    assert len(client.calls) == 1  # the second and third reads were cache hits
    column = schema.column_names.index("platform")
    assert ios[column] != android[column]
    assert plain[column] in (ios[column], android[column])


def test_unprocessed_keys_fail_only_those_logins(tiny_version_dir, dynalite_server):
    throttled = player_key(TEST_GAME, player_id(5))
    client = CountingClient(dynalite_server.client(), unprocess={throttled})
    store = store_for(tiny_version_dir, client, feature_cache_ttl_s=0)
    rows = asyncio.run(read_all(store, [player_id(4), player_id(5), player_id(6)]))
    assert isinstance(rows[1], FeatureStoreUnavailable)
    assert rows[0] is not None and rows[2] is not None
    assert not isinstance(rows[0], Exception) and not isinstance(rows[2], Exception)


@pytest.mark.parametrize("batch_reads", [True, False])
def test_unreachable_store_fails_every_login_fast(tiny_version_dir, batch_reads):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    client = local_client(endpoint, timeout_s=0.25)
    store = store_for(tiny_version_dir, client, dynamodb_batch_reads=batch_reads)
    started = time.monotonic()
    rows = asyncio.run(read_all(store, [player_id(i) for i in range(10)]))
    assert all(isinstance(r, FeatureStoreUnavailable) for r in rows)
    assert time.monotonic() - started < 5.0


def test_breaker_stops_calling_a_failing_store_then_retries_after_the_reset_timeout(
    tiny_version_dir,
):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    client = CountingClient(local_client(endpoint, timeout_s=0.25))
    store = store_for(
        tiny_version_dir,
        client,
        dynamodb_batch_reads=False,
        feature_cache_ttl_s=0,
        dynamodb_breaker_fail_max=3,
        dynamodb_breaker_reset_timeout_s=0.5,
    )

    async def reads(n):
        return [await _read_or_error(store, player_id(i)) for i in range(n)]

    first = asyncio.run(reads(6))
    assert all(isinstance(r, FeatureStoreUnavailable) for r in first)
    assert len(client.calls) == 3  # the breaker opened after 3 failures
    assert "circuit open" in str(first[-1])
    assert store.breaker_state == "open"
    time.sleep(0.6)
    asyncio.run(reads(1))  # one trial call after the reset timeout (fails again here)
    assert len(client.calls) == 4


async def _read_or_error(store, pid):
    try:
        return await store.player_row(pid)
    except FeatureStoreUnavailable as exc:
        return exc


@pytest.fixture
def slow_proxy(dynalite_server, tmp_path):
    """The delay proxy (loadtest/reliability/) before the test dynalite, delay off until SIGUSR1."""
    import signal
    import socket
    import subprocess
    import sys

    port = free_port()
    log = (tmp_path / "delay-proxy.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadtest.reliability.delay_proxy",
            "--listen",
            f"127.0.0.1:{port}",
            "--target",
            f"127.0.0.1:{dynalite_server.port}",
            "--delay-ms",
            "800",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "delay proxy did not start"
                time.sleep(0.1)
        yield (
            f"http://127.0.0.1:{port}",
            lambda on: process.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2),
        )
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def test_a_slow_store_gives_flagged_fallbacks_in_budget_opens_the_breaker_and_recovers(
    tiny_version_dir, slow_proxy, monkeypatch
):
    """+800 ms per call (slow, not down): botocore's read timeout (0.25 s x 2 attempts, the
    settings' defaults) fails each read well inside the budget, the breaker opens after
    fail_max of them, then reads fail fast; once the store is quick again, a trial read after
    the reset timeout closes the breaker, without a restart."""
    from app.adapters.dynamodb import make_client
    from app.core.online.offer_service import FallbackReason, OfferQuery, OfferService
    from tests.support import FakeMember

    endpoint, slow = slow_proxy
    config = settings(
        dynamodb_endpoint_url=endpoint,
        feature_cache_ttl_s=0,
        dynamodb_breaker_fail_max=3,
        dynamodb_breaker_reset_timeout_s=1.0,
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")  # dynalite takes any signed request
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    manifest = load_manifest(tiny_version_dir)
    client = make_client(config)
    sends: list[float] = []  # one per HTTP call botocore makes, retries included
    client.meta.events.register("before-send", lambda **_: sends.append(time.perf_counter()))
    store = FeatureStore(config, manifest.feature_schema, TEST_GAME, client=client)
    members = [
        FakeMember(e.name, e.weight, lambda m: np.full(m.shape[0], 0.2)) for e in manifest.members
    ]
    from app.core.online.fanout import Fanout

    service = OfferService(manifest, store, Fanout(members), request_budget_ms=1000, quorum=0.5)

    async def login(i):
        started = time.perf_counter()
        answer = await service.recommend(OfferQuery(game=TEST_GAME, player_id=player_id(i)))
        ended = time.perf_counter()
        # Wall time less the stalls of the whole process meanwhile (tests.support.HostStalls;
        # the service runs in this process): the service's own share of the login.
        return answer, (ended - started - stalls.within(started, ended)) * 1000

    async def logins(ids):
        return [await login(i) for i in ids]

    with HostStalls() as stalls:
        assert asyncio.run(login(1))[0].personalized  # quick store: personalized
        slow(True)
        time.sleep(0.2)
        calls_before = len(sends)
        first_slow = asyncio.run(login(2))
        # The read failed (that is what answered the login), so its calls are all made:
        # dynamodb_max_attempts of them, the first included (botocore's `max_attempts`
        # would count retries only, one call more: 0.8 s of a 1 s budget).
        assert len(sends) - calls_before == config.dynamodb_max_attempts == 2
        slow_answers = [first_slow, *asyncio.run(logins(range(3, 8)))]
    assert all(
        a.fallback_reason is FallbackReason.FEATURE_STORE_UNAVAILABLE for a, _ in slow_answers
    )
    assert all(ms < 1000 + 100 for _, ms in slow_answers), [ms for _, ms in slow_answers]
    assert store.breaker_state == "open"
    # Once open, a login does not wait on the slow store at all: it is answered before even
    # one botocore read timeout (0.25 s) could have passed.
    assert slow_answers[-1][1] < 250

    slow(False)
    time.sleep(1.2)  # the breaker's reset timeout
    assert asyncio.run(login(9))[0].personalized
    assert store.breaker_state == "closed"
    store.close()


@pytest.fixture
def throttling_table():
    """A DynamoDB endpoint that throttles every call, as a hot partition does; it records
    when each call arrived."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    arrivals: list[float] = []
    body = json.dumps(
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "The level of configured provisioned throughput for the table was exceeded",
        }
    ).encode()

    class Throttle(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrivals.append(time.perf_counter())
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(400)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Throttle)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", arrivals
    finally:
        server.shutdown()
        server.server_close()


def test_a_throttled_read_is_retried_at_once_not_after_a_second(throttling_table, monkeypatch):
    """botocore's standard mode sleeps rand(0, 1) x 1 s before retrying a throttled call:
    a login's read would wait out most of its budget for its second try. On a login's clock
    the retry comes 50 ms after the throttled call."""
    from botocore.exceptions import ClientError

    from app.adapters.dynamodb import make_client

    endpoint, arrivals = throttling_table
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    config = settings(dynamodb_endpoint_url=endpoint)
    client = make_client(config)
    gaps = []
    with HostStalls() as stalls:
        for _ in range(3):
            before = len(arrivals)
            with pytest.raises(ClientError) as raised:
                client.get_item(TableName=TEST_TABLE, Key={PARTITION_KEY: {"S": "g#p"}})
            assert raised.value.response["Error"]["Code"].endswith("ThroughputExceededException")
            first, second = arrivals[before:]  # dynamodb_max_attempts calls: 2
            gaps.append(second - first - stalls.within(first, second))
    assert all(gap < 0.25 for gap in gaps), gaps
