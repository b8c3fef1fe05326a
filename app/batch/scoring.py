"""The actor that scores batches of players: Ray Data's callable class on an actor pool."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_limits

from app.adapters.member_model import load_group
from app.adapters.model_store import local_version
from app.batch.datasource import PLAYER_ID, feature_columns
from app.contract.manifest import Runtime, load_manifest
from app.core.offers import OfferCatalog
from app.core.offline.batch_scoring import BatchScorer

# The Parquet columns, in order.
OUTPUT_COLUMNS = (
    "player_id",
    "version",
    "offer_id",
    "propensity",
    "expected_revenue",
    "scored_at",
)


class ScorePlayers:
    """Loads and verifies every member once (sha256 before parsing, then the fidelity check
    rows), then scores batches with the version's runtime."""

    def __init__(self, version_dir: str, scored_at_us: int, runtime: Runtime = "onnx") -> None:
        folder = local_version(version_dir)  # a store URI: this node's cached copy
        manifest = load_manifest(folder)
        self._version = manifest.version
        self._features = feature_columns(manifest.feature_schema)
        self._catalog = OfferCatalog(manifest)
        self._offer_ids = np.array([o.offer_id for o in self._catalog.offers], dtype=object)
        # The serving runtime, checked against the manifest's native scores like a replica's.
        members = load_group(manifest.members, folder, runtime, manifest.fidelity)
        self._scorer = BatchScorer(
            self._catalog, members, {e.name: e.weight for e in manifest.members}
        )
        self._scored_at_us = scored_at_us

    def __call__(self, batch: dict[str, np.ndarray]) -> pa.Table:
        rows = np.column_stack([batch[name] for name in self._features]).astype(
            np.float32, copy=False
        )
        # Ray Data calls this on a thread of its own, and OpenMP's thread cap is per calling
        # thread: the cap load_group set does not reach it, so HistGradientBoosting
        # would run a team as wide as the machine in every actor, against the other actors.
        with threadpool_limits(limits=1, user_api="openmp"):
            scored = self._scorer.score(rows)
        n = rows.shape[0]
        return pa.table(
            {
                "player_id": pa.array(batch[PLAYER_ID], pa.string()),
                "version": pa.array(np.full(n, self._version, dtype=object), pa.string()),
                "offer_id": pa.array(self._offer_ids[scored.offer_index], pa.string()),
                "propensity": pa.array(scored.propensity, pa.float64()),
                "expected_revenue": pa.array(scored.expected_revenue, pa.float64()),
                # One instant for the whole run: the snapshot's age runs from it.
                "scored_at": pa.array(
                    np.full(n, self._scored_at_us, dtype=np.int64), pa.timestamp("us", tz="UTC")
                ),
            }
        )
