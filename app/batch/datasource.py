"""The feature table as a Ray Data datasource: one read task per parallel-Scan segment."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from app.adapters.dynamodb_scan import ReadUnit, SegmentScan
from app.config.settings import get_settings
from app.contract.feature_schema import FeatureSchema

PLAYER_ID = "player_id"


def feature_columns(schema: FeatureSchema) -> list[str]:
    return [f.name for f in schema.player_features]


def page_table(schema: FeatureSchema, player_ids: list[str], rows: np.ndarray) -> pa.Table:
    """A block: the player id, then one float32 column per encoded feature."""
    columns: dict[str, Any] = {PLAYER_ID: pa.array(player_ids, pa.string())}
    for i, name in enumerate(feature_columns(schema)):
        columns[name] = pa.array(rows[:, i], pa.float32())
    return pa.table(columns)


class PlayerScanDatasource(Datasource):
    def __init__(
        self,
        schema: FeatureSchema,
        game: str,
        *,
        segments: int,
        read_budget_per_s: float,
        unit: ReadUnit,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._schema = schema
        self._game = game
        self._segments = segments
        self._budget = read_budget_per_s
        self._unit = unit

    def get_name(self) -> str:
        return "DynamoDBScan"

    def estimate_inmemory_data_size(self) -> int | None:
        return None  # a Scan does not know its size before it runs

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        # The table's segments, not Ray's requested parallelism, decide the split: each
        # segment is one independent, retryable unit of the Scan.
        return [
            ReadTask(
                self._reader(segment),
                BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None),
                per_task_row_limit=per_task_row_limit,
            )
            for segment in range(self._segments)
        ]

    def _reader(self, segment: int) -> Any:
        schema, game, total = self._schema, self._game, self._segments
        per_segment = self._budget / total
        unit = self._unit

        def read() -> Iterator[pa.Table]:
            # Settings come from the worker's environment, as in a Serve replica.
            scan = SegmentScan(
                get_settings(),
                schema,
                game,
                segment=segment,
                total_segments=total,
                budget_per_s=per_segment,
                unit=unit,
            )
            for page in scan.pages():
                yield page_table(schema, page.player_ids, page.rows)

        return read
