"""Player features from DynamoDB, decoded through the version's schema.

Key design: the partition key `pk` is "<game>#<player_id>", so a login is one key lookup and
one table serves every game. Concurrent logins share one BatchGetItem, and recently read
players come from a bounded TTL cache. The same code talks to AWS and to the local dynalite
server; only the endpoint differs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from cachetools import TTLCache

from app.adapters.aws_session import new_session
from app.adapters.circuit_breaker import CircuitBreaker, CircuitOpen
from app.config.settings import Settings
from app.contract.feature_schema import FeatureSchema, FeatureValue
from app.core.online.coalescing import Coalescer, Pending
from app.core.online.feature_source import FeatureStoreUnavailable
from app.core.telemetry import NoTelemetry, Telemetry

logger = logging.getLogger(__name__)

PARTITION_KEY = "pk"
# Not a valid player id (ids are [A-Za-z0-9_-]), so it never names a real item.
WARM_UP_PLAYER = "#warm-up"
# DynamoDB's limit on keys per BatchGetItem.
BATCH_GET_MAX_KEYS = 100

Item = Mapping[str, Any]
T = TypeVar("T")
R = TypeVar("R")


def player_key(game: str, player_id: str) -> str:
    return f"{game}#{player_id}"


def make_client(
    settings: Settings,
    *,
    read_timeout_s: float | None = None,
    max_attempts: int | None = None,
    login_clock: bool = True,
) -> Any:  # boto3 clients are built dynamically
    """A DynamoDB client whose timeouts and retries are botocore's, configured from settings.

    On a login's clock (the default) a retry comes 50 ms after the failed call, whatever
    failed: botocore's `legacy` mode for DynamoDB. Its `standard` mode sleeps up to 1 s
    (rand(0, 1) x 1 s) before retrying a throttled read, more than a login's budget can
    give: the login fell back at its deadline, holding a read thread and a batch slot.
    `read_timeout_s` / `max_attempts` and `login_clock=False` are for callers that are not
    on a login's clock (the batch Scan): there, `standard`'s growing backoff paces a
    throttled Scan as AWS advises.
    """
    config = Config(
        connect_timeout=settings.dynamodb_connect_timeout_s,
        read_timeout=read_timeout_s or settings.dynamodb_read_timeout_s,
        # total_max_attempts counts the first call; botocore's `max_attempts` counts only the
        # retries, so 2 there made 3 calls of 0.25 s each: a slow table held a login 0.8 s
        # of its 1 s budget instead of 0.5.
        retries={
            "total_max_attempts": max_attempts or settings.dynamodb_max_attempts,
            "mode": "legacy" if login_clock else "standard",
        },
        max_pool_connections=settings.dynamodb_max_pool_connections,
    )
    endpoint = str(settings.dynamodb_endpoint_url) if settings.dynamodb_endpoint_url else None
    return new_session().client(
        "dynamodb", region_name=settings.aws_region, endpoint_url=endpoint, config=config
    )


def table_definition(table: str) -> dict[str, Any]:
    """CreateTable arguments for the feature table (used locally; production uses IaC)."""
    return {
        "TableName": table,
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": PARTITION_KEY, "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


class FeatureStore:
    """Reads one game's player rows without blocking the caller's event loop."""

    def __init__(
        self,
        settings: Settings,
        schema: FeatureSchema,
        game: str,
        *,
        client: Any = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._schema = schema
        self._telemetry = telemetry or NoTelemetry()
        self._game = game
        self._table = settings.dynamodb_table
        self._client = client if client is not None else make_client(settings)
        # boto3 is synchronous; a bounded pool sized like the HTTP connection pool keeps
        # reads off the event loop without queueing more calls than there are connections.
        self._closed = False
        self._executor = ThreadPoolExecutor(
            max_workers=settings.dynamodb_max_pool_connections, thread_name_prefix="features"
        )
        # Only fetch the attributes the schema decodes (plus the key, so a player whose item
        # holds none of them still reads as known); "#fN" placeholders sidestep DynamoDB's
        # reserved words (e.g. LEVEL).
        names = [PARTITION_KEY] + [f.name for f in schema.player_features]
        self._projection = ", ".join(f"#f{i}" for i in range(len(names)))
        self._attribute_names = {f"#f{i}": name for i, name in enumerate(names)}
        # Counts consecutive failed DynamoDB calls (errors, throttling, timeouts after
        # botocore's retries); once open, reads fail fast instead of adding load. It never
        # holds a lock across a call, so reads run concurrently up to the pool size.
        self._breaker = CircuitBreaker(
            fail_max=settings.dynamodb_breaker_fail_max,
            reset_timeout_s=settings.dynamodb_breaker_reset_timeout_s,
        )
        self._cache: TTLCache[str, Item] | None = (
            TTLCache(settings.feature_cache_max_players, settings.feature_cache_ttl_s)
            if settings.feature_cache_ttl_s > 0
            else None
        )
        self._reads: dict[str, asyncio.Future[Item | None]] = {}
        self._batches: Coalescer[str, Item | None] | None = (
            Coalescer(
                self._read_batch,
                max_size=BATCH_GET_MAX_KEYS,
                max_in_flight=settings.dynamodb_max_batches_in_flight,
            )
            if settings.dynamodb_batch_reads
            else None
        )

    @property
    def breaker_state(self) -> str:
        """ "closed", "open" or "half-open"."""
        return self._breaker.state

    def _guarded(self, read: Callable[[T], R], arg: T) -> R:
        try:
            return self._breaker.call(read, arg)
        except CircuitOpen as exc:
            raise FeatureStoreUnavailable(
                "circuit open: DynamoDB failed repeatedly, not calling it for now"
            ) from exc

    async def warm_up(self) -> bool:
        """One real GetItem (of a key no player has) through the client and pool.

        It resolves credentials, opens a connection and loads botocore's models before the
        first player logs in. A failure is reported, not raised: a table that is down at
        start-up gives flagged fallbacks, not a replica that never becomes ready. It does not
        count towards the circuit breaker.
        """
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._get_item, WARM_UP_PLAYER)
        except FeatureStoreUnavailable as exc:
            logger.warning("feature store warm-up failed: %s", exc)
            return False
        return True

    def close(self) -> None:
        """Cancel queued batched reads and stop the read threads (replica shutdown)."""
        self._closed = True
        if self._batches is not None:
            self._batches.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _get_item(self, player_id: str) -> Item | None:
        try:
            response = self._client.get_item(
                TableName=self._table,
                Key={PARTITION_KEY: {"S": player_key(self._game, player_id)}},
                ProjectionExpression=self._projection,
                ExpressionAttributeNames=self._attribute_names,
            )
        except (BotoCoreError, ClientError) as exc:
            raise FeatureStoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        item: Item | None = response.get("Item")
        return item

    def _batch_get(self, player_ids: list[str]) -> tuple[dict[str, Item], list[str]]:
        """Items by player id, and the ids DynamoDB left unprocessed (throttling)."""
        keys = {player_key(self._game, p): p for p in player_ids}
        try:
            response = self._client.batch_get_item(
                RequestItems={
                    self._table: {
                        "Keys": [{PARTITION_KEY: {"S": k}} for k in keys],
                        "ProjectionExpression": self._projection,
                        "ExpressionAttributeNames": self._attribute_names,
                    }
                }
            )
        except (BotoCoreError, ClientError) as exc:
            raise FeatureStoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        found = {
            keys[item[PARTITION_KEY]["S"]]: item
            for item in response.get("Responses", {}).get(self._table, [])
            if item.get(PARTITION_KEY, {}).get("S") in keys
        }
        unprocessed = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
        return found, [keys[k[PARTITION_KEY]["S"]] for k in unprocessed]

    async def _read_batch(self, batch: list[Pending[str, Item | None]]) -> None:
        wanted = list(dict.fromkeys(p.item for p in batch if not p.future.done()))
        if not wanted:
            return
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            found, unprocessed = await loop.run_in_executor(
                self._executor, self._guarded, self._batch_get, wanted
            )
        except FeatureStoreUnavailable:
            self._observe("BatchGetItem", started, ok=False)
            raise
        self._observe("BatchGetItem", started, ok=True)
        throttled = set(unprocessed)
        for pending in batch:
            if pending.future.done():
                continue
            if pending.item in throttled:
                # No retry loop of our own: this login gets the flagged fallback, the next
                # one reads again.
                pending.future.set_exception(
                    FeatureStoreUnavailable("BatchGetItem left the key unprocessed (throttled)")
                )
            else:
                pending.future.set_result(found.get(pending.item))

    async def _item(self, player_id: str) -> Item | None:
        if self._closed:
            raise FeatureStoreUnavailable("feature store closed (replica shutting down)")
        if self._cache is not None and (item := self._cache.get(player_id)) is not None:
            return item
        # Single flight: logins of one player that miss the cache together share one read
        # (a hot player is read once per TTL, not once per login). The read is a task of its
        # own, shielded, so one login giving up (deadline, client gone) does not cancel it
        # for the others.
        read = self._reads.get(player_id)
        if read is None:
            read = asyncio.ensure_future(self._read(player_id))
            self._reads[player_id] = read
            read.add_done_callback(lambda done: self._read_done(player_id, done))
        return await asyncio.shield(read)

    def _read_done(self, player_id: str, read: asyncio.Future[Item | None]) -> None:
        if self._reads.get(player_id) is read:
            del self._reads[player_id]
        if not read.cancelled():
            read.exception()  # retrieved here, so no waiter left is not an unhandled error

    async def _read(self, player_id: str) -> Item | None:
        try:
            if self._batches is not None:
                item = await self._batches.submit(player_id)
            else:
                loop = asyncio.get_running_loop()
                started = time.perf_counter()
                try:
                    item = await loop.run_in_executor(
                        self._executor, self._guarded, self._get_item, player_id
                    )
                except FeatureStoreUnavailable:
                    self._observe("GetItem", started, ok=False)
                    raise
                self._observe("GetItem", started, ok=True)
        except asyncio.CancelledError:
            # No login cancels this task (they wait on it through a shield): its queued read
            # or thread was cancelled because the store is closing (replica shutdown).
            raise FeatureStoreUnavailable("feature store closed (replica shutting down)") from None
        # Unknown players are not cached: one may register and get features any moment.
        if item is not None and self._cache is not None:
            self._cache[player_id] = item
        return item

    def _observe(self, operation: str, started: float, *, ok: bool) -> None:
        # On the event loop, after the call: the read as a login waits for it (pool queueing
        # included). An open breaker's instant refusal counts too, as an error.
        self._telemetry.dynamodb_read(operation, (time.perf_counter() - started) * 1000.0, ok)
        self._telemetry.breaker(self._breaker.state)

    def cached_row(
        self, player_id: str, overrides: Mapping[str, FeatureValue] | None = None
    ) -> np.ndarray | None:
        """The player's row from the TTL cache, or None if it is not cached (no I/O)."""
        if self._closed or self._cache is None:
            return None
        item = self._cache.get(player_id)
        return None if item is None else self._schema.decode_item(item, overrides)

    async def player_row(
        self, player_id: str, overrides: Mapping[str, FeatureValue] | None = None
    ) -> np.ndarray | None:
        """The player's encoded feature row, or None if the player is unknown.

        Raises:
            FeatureStoreUnavailable: DynamoDB failed after botocore's retries.
        """
        item = await self._item(player_id)
        if item is None:
            return None
        return self._schema.decode_item(item, overrides)
