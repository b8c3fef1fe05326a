"""Finding and reading a version's newest precomputed-offers snapshot (local folder or S3).

The batch job writes `<root>/game=<g>/version=<v>/run=<scored_at>/_offers.snapshot` last, after
its Parquet files. A supervisor takes the newest run whose snapshot is younger than the
maximum age, reads and verifies it, and refuses (with a log line) one that is damaged or made
for another version, trying the next older run instead. Blocking I/O: callers run it off
their event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from app.contract.manifest import Manifest
from app.contract.offer_snapshot import (
    SNAPSHOT_FILENAME,
    OfferSnapshot,
    SnapshotError,
    SnapshotHeader,
    build,
    check,
    parse,
    read_header,
    snapshot_keys,
    version_prefix,
)

logger = logging.getLogger(__name__)

# Enough for any header (a few hundred bytes plus the catalog's offer ids).
_HEADER_PROBE_BYTES = 64 * 1024


def _filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(root)  # type: ignore[no-any-return]


def latest_snapshot(
    root: str,
    manifest: Manifest,
    *,
    max_age_s: float,
    newer_than_s: float | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[OfferSnapshot, str] | None:
    """The newest valid snapshot of `manifest`'s version younger than `max_age_s`, with its
    path; None if there is none. `newer_than_s`: skip runs scored at or before this time (the
    one already loaded)."""
    fs, base = _filesystem(root)
    folder = f"{base.rstrip('/')}/{version_prefix(manifest.game, manifest.version)}"
    runs = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    names = sorted(
        (
            i.path
            for i in runs
            if i.type == pafs.FileType.Directory and i.base_name.startswith("run=")
        ),
        reverse=True,
    )
    for run in names:
        path = f"{run}/{SNAPSHOT_FILENAME}"
        try:
            if fs.get_file_info(path).type != pafs.FileType.File:
                continue  # a run still writing, or one that failed before its snapshot
            with fs.open_input_file(path) as fh:
                header, _ = read_header(fh.read(_HEADER_PROBE_BYTES))
            scored_at = header.scored_at.timestamp()
            if newer_than_s is not None and scored_at <= newer_than_s:
                return None
            if clock() - scored_at > max_age_s:
                logger.info("newest precomputed snapshot %s is older than %.0fs", path, max_age_s)
                return None
            with fs.open_input_file(path) as fh:
                snapshot = parse(fh.read())
            check(
                snapshot.header,
                game=manifest.game,
                version=manifest.version,
                training_config_hash=manifest.training_config_hash,
                offer_ids=[o.offer_id for o in manifest.offers],
            )
        except (SnapshotError, OSError) as exc:
            logger.error("refused precomputed snapshot %s: %s", path, exc)
            continue
        return snapshot, path
    return None


def write_snapshot(
    run_folder: str, manifest: Manifest, scored_at: datetime
) -> tuple[str, SnapshotHeader, int]:
    """Build the run's snapshot from its Parquet files and write it beside them, last.

    Reads only three columns, one file at a time; holds the snapshot's 13 bytes per player
    (what every supervisor replica holds too). Returns its path, header and size in bytes.
    """
    fs, base = _filesystem(run_folder)
    files = sorted(
        i.path
        for i in fs.get_file_info(pafs.FileSelector(base, recursive=True))
        if i.type == pafs.FileType.File and i.base_name.endswith(".parquet")
    )
    index = {o.offer_id: i for i, o in enumerate(manifest.offers)}
    keys, offers, propensities = [], [], []
    for path in files:
        table = pq.read_table(path, columns=["player_id", "offer_id", "propensity"], filesystem=fs)
        keys.append(snapshot_keys(table.column("player_id").to_pylist()))
        offers.append(
            np.fromiter((index[o] for o in table.column("offer_id").to_pylist()), np.uint8)
        )
        propensities.append(table.column("propensity").to_numpy().astype(np.float32))
    data = build(
        game=manifest.game,
        version=manifest.version,
        training_config_hash=manifest.training_config_hash,
        offer_ids=[o.offer_id for o in manifest.offers],
        keys=np.concatenate(keys) if keys else np.empty(0, np.uint64),
        offers=np.concatenate(offers) if offers else np.empty(0, np.uint8),
        propensities=np.concatenate(propensities) if propensities else np.empty(0, np.float32),
        scored_at=scored_at,
    )
    path = f"{base.rstrip('/')}/{SNAPSHOT_FILENAME}"
    # Written under a temporary name and moved: a supervisor never reads half a file (on S3
    # a PUT is atomic anyway, and the move is a copy).
    partial = f"{path}.partial"
    with fs.open_output_stream(partial) as out:
        out.write(data)
    fs.move(partial, path)
    header, _ = read_header(data)
    return path, header, len(data)
