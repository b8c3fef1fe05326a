import logging
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.adapters.snapshot_store import latest_snapshot, write_snapshot
from app.contract import offer_snapshot as snap
from tests.support import small_manifest

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def write_run(root, manifest, scored_at, players, *, version=None):
    folder = (
        root / snap.version_prefix(manifest.game, manifest.version) / snap.run_folder(scored_at)
    )
    folder.mkdir(parents=True)
    data = snap.build(
        game=manifest.game,
        version=version or manifest.version,
        training_config_hash=manifest.training_config_hash,
        offer_ids=[o.offer_id for o in manifest.offers],
        keys=snap.snapshot_keys(players),
        offers=np.zeros(len(players), np.uint8),
        propensities=np.full(len(players), 0.5, np.float32),
        scored_at=scored_at,
    )
    (folder / snap.SNAPSHOT_FILENAME).write_bytes(data)
    return folder / snap.SNAPSHOT_FILENAME


def latest(root, manifest, max_age=timedelta(hours=36), **kwargs):
    return latest_snapshot(
        str(root), manifest, max_age_s=max_age.total_seconds(), clock=NOW.timestamp, **kwargs
    )


def test_the_newest_run_wins(tmp_path):
    manifest = small_manifest()
    write_run(tmp_path, manifest, NOW - timedelta(hours=30), ["old"])
    newest = write_run(tmp_path, manifest, NOW - timedelta(hours=2), ["new"])
    snapshot, path = latest(tmp_path, manifest)
    assert path == str(newest)
    assert snapshot.find(snap.snapshot_key("new")) is not None


def test_damaged_or_foreign_snapshots_are_refused_with_a_log_line(tmp_path, caplog):
    manifest = small_manifest()
    good = write_run(tmp_path, manifest, NOW - timedelta(hours=5), ["a"])
    foreign = write_run(tmp_path, manifest, NOW - timedelta(hours=3), ["b"], version="v-other")
    damaged = write_run(tmp_path, manifest, NOW - timedelta(hours=1), ["c"])
    data = damaged.read_bytes()
    damaged.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with caplog.at_level(logging.ERROR):
        _, path = latest(tmp_path, manifest)
    assert path == str(good)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 2
    assert any("checksum" in m and str(damaged) in m for m in refused)
    assert any("v-other" in m and str(foreign) in m for m in refused)


def test_too_old_missing_or_already_loaded_gives_none(tmp_path):
    manifest = small_manifest()
    assert latest(tmp_path, manifest) is None  # no folder at all
    write_run(tmp_path, manifest, NOW - timedelta(hours=40), ["a"])
    assert latest(tmp_path, manifest) is None
    write_run(tmp_path, manifest, NOW - timedelta(hours=1), ["b"])
    loaded = (NOW - timedelta(hours=1)).timestamp()
    assert latest(tmp_path, manifest, newer_than_s=loaded) is None
    assert latest(tmp_path, manifest, newer_than_s=loaded - 1) is not None


def test_a_run_without_its_snapshot_yet_is_skipped(tmp_path):
    manifest = small_manifest()
    done = write_run(tmp_path, manifest, NOW - timedelta(hours=2), ["a"])
    writing = (
        tmp_path / snap.version_prefix(manifest.game, manifest.version) / "run=29990101T000000Z"
    )
    writing.mkdir()
    assert latest(tmp_path, manifest)[1] == str(done)


def test_write_snapshot_reads_the_runs_parquet_files(tmp_path):
    manifest = small_manifest()
    folder = tmp_path / "run"
    folder.mkdir()
    for i, ids in enumerate((["p1", "p2"], ["p3"])):
        pq.write_table(
            pa.table(
                {
                    "player_id": ids,
                    "offer_id": ["big"] * len(ids),
                    "propensity": [0.25] * len(ids),
                }
            ),
            folder / f"part-{i}.parquet",
        )
    path, header, size = write_snapshot(str(folder), manifest, NOW)
    snapshot = snap.parse((folder / snap.SNAPSHOT_FILENAME).read_bytes())
    assert path.endswith(snap.SNAPSHOT_FILENAME) and header.players == 3
    assert size == (folder / snap.SNAPSHOT_FILENAME).stat().st_size
    row = snapshot.find(snap.snapshot_key("p3"))
    assert manifest.offers[int(snapshot.offers[row])].offer_id == "big"
    assert not list(folder.glob("*.partial"))
