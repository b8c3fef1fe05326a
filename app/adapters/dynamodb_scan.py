"""One segment of a parallel DynamoDB Scan of one game's players, paced to a read budget.

The batch job runs one of these per segment (`Segment` / `TotalSegments`), each in its own
Ray read task, so the Scan spreads over the cluster. Items are decoded with the version's
feature schema, the same code that decodes a login's GetItem.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from app.adapters.dynamodb import PARTITION_KEY, make_client
from app.config.settings import Settings
from app.contract.feature_schema import FeatureSchema
from app.core.offline.pacing import ReadPacer

ReadUnit = Literal["items", "read_units"]

# A Scan page is up to 1 MB and no login waits for it: botocore gets seconds per page and
# more retries (with backoff) than a login's 250 ms, so throttling slows the run down
# instead of failing its read task.
SCAN_READ_TIMEOUT_S = 30.0
SCAN_MAX_ATTEMPTS = 8


@dataclass(frozen=True)
class ScanPage:
    player_ids: list[str]
    rows: np.ndarray  # (n, player width) float32, encoded
    scanned: int  # items the table read for this page (all games)
    read_units: float | None  # consumed capacity, when the table reports it


@dataclass
class SegmentStats:
    pages: int = 0
    players: int = 0
    scanned: int = 0
    read_units: float = 0.0
    waited_s: float = 0.0
    elapsed_s: float = 0.0


class SegmentScan:
    def __init__(
        self,
        settings: Settings,
        schema: FeatureSchema,
        game: str,
        *,
        segment: int,
        total_segments: int,
        budget_per_s: float,
        unit: ReadUnit = "items",
        page_limit: int = 1000,
        client: Any = None,
    ) -> None:
        if not 0 <= segment < total_segments:
            raise ValueError(f"segment {segment} is not in [0, {total_segments})")
        self._schema = schema
        self._table = settings.dynamodb_table
        self._prefix = f"{game}#"
        self._segment = segment
        self._total = total_segments
        self._unit = unit
        self._client = (
            client
            if client is not None
            else make_client(
                settings,
                read_timeout_s=SCAN_READ_TIMEOUT_S,
                max_attempts=SCAN_MAX_ATTEMPTS,
                login_clock=False,
            )
        )
        self._pacer = ReadPacer(budget_per_s)
        # A page never asks for more than a second of the budget (in items), so pacing is
        # smooth rather than one large page and a long pause.
        self._limit = max(1, min(page_limit, int(budget_per_s))) if unit == "items" else page_limit
        names = [PARTITION_KEY] + [f.name for f in schema.player_features]
        self._projection = ", ".join(f"#f{i}" for i in range(len(names)))
        self._names = {f"#f{i}": name for i, name in enumerate(names)}
        self.stats = SegmentStats()

    def pages(self) -> Iterator[ScanPage]:
        """Every page of this segment, in order; each holds only this game's players.

        botocore's retries handle throttling and transient errors; anything left raises, and
        Ray Data retries the whole read task.
        """
        started = time.perf_counter()
        start_key: dict[str, Any] | None = None
        while True:
            self._pacer.wait()
            request: dict[str, Any] = {
                "TableName": self._table,
                "Segment": self._segment,
                "TotalSegments": self._total,
                "Limit": self._limit,
                "ProjectionExpression": self._projection,
                # The table holds every game: the filter trims the response, not the read
                # (the scanned items of other games are paid for too).
                "FilterExpression": "begins_with(#f0, :prefix)",
                "ExpressionAttributeNames": self._names,
                "ExpressionAttributeValues": {":prefix": {"S": self._prefix}},
                "ReturnConsumedCapacity": "TOTAL",
            }
            if start_key is not None:
                request["ExclusiveStartKey"] = start_key
            response = self._client.scan(**request)
            items = response.get("Items", [])
            scanned = int(response.get("ScannedCount", len(items)))
            units = response.get("ConsumedCapacity", {}).get("CapacityUnits")
            cost = float(units) if self._unit == "read_units" and units is not None else scanned
            self._pacer.spend(cost)
            page = self._decode(items, scanned, None if units is None else float(units))
            stats = self.stats
            stats.pages += 1
            stats.players += len(page.player_ids)
            stats.scanned += scanned
            stats.read_units += page.read_units or 0.0
            stats.waited_s = self._pacer.waited_s
            stats.elapsed_s = time.perf_counter() - started
            if page.player_ids:
                yield page
            start_key = response.get("LastEvaluatedKey")
            if not start_key:
                return

    def _decode(self, items: list[dict[str, Any]], scanned: int, units: float | None) -> ScanPage:
        prefix_len = len(self._prefix)
        ids = [item[PARTITION_KEY]["S"][prefix_len:] for item in items]
        rows = np.empty((len(items), self._schema.player_width), dtype=np.float32)
        for i, item in enumerate(items):
            rows[i] = self._schema.decode_item(item)
        return ScanPage(ids, rows, scanned, units)
