from datetime import UTC, datetime

import numpy as np
import pytest

from app.contract import offer_snapshot as snap

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

SCORED_AT = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
OFFERS = ("cheap", "mid", "big")


def encode(ids, offers, props, **overrides):
    kwargs = dict(
        game="test-game",
        version="v-test",
        training_config_hash="abc",
        offer_ids=OFFERS,
        keys=snap.snapshot_keys(ids),
        offers=np.asarray(offers, np.uint8),
        propensities=np.asarray(props, np.float32),
        scored_at=SCORED_AT,
    )
    kwargs.update(overrides)
    return snap.build(**kwargs)


def test_round_trip_finds_every_player_and_only_them():
    ids = [f"p{i:07d}" for i in range(1000)]
    rng = np.random.default_rng(0)
    offers, props = rng.integers(0, 3, 1000), rng.random(1000)
    snapshot = snap.parse(encode(ids, offers, props))
    assert snapshot.header.players == 1000
    assert snapshot.header.scored_at == SCORED_AT
    for i in (0, 17, 999):
        row = snapshot.find(snap.snapshot_key(ids[i]))
        assert row is not None
        assert int(snapshot.offers[row]) == offers[i]
        assert float(snapshot.propensities[row]) == pytest.approx(props[i], abs=1e-7)
    assert snapshot.find(snap.snapshot_key("p9999999")) is None


def test_thirteen_bytes_per_player_plus_a_small_header():
    data = encode([f"p{i}" for i in range(10_000)], [1] * 10_000, [0.5] * 10_000)
    _, columns_at = snap.read_header(data)
    assert columns_at < 400
    assert len(data) - columns_at == snap.BYTES_PER_PLAYER * 10_000 == 13 * 10_000
    assert snap.parse(data).nbytes == 13 * 10_000


def test_colliding_keys_are_dropped_not_guessed():
    keys = np.array([5, 9, 5, 7], np.uint64)
    data = encode(["x"] * 4, [0, 1, 2, 0], [0.1, 0.2, 0.3, 0.4], keys=keys)
    snapshot = snap.parse(data)
    assert snapshot.header.dropped_collisions == 2
    assert snapshot.keys.tolist() == [7, 9]
    assert snapshot.find(5) is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # cut short
        lambda b: b[:-5] + bytes([b[-5] ^ 0xFF]) + b[-4:],  # one byte flipped
        lambda b: b"NOTASNAP\n" + b[9:],  # bad magic
        lambda b: b[:20],  # header cut
    ],
)
def test_damaged_files_are_refused(damage):
    data = encode(["a", "b", "c"], [0, 1, 2], [0.1, 0.2, 0.3])
    with pytest.raises(snap.SnapshotError):
        snap.parse(damage(data))


def test_a_snapshot_for_another_version_or_catalog_is_refused():
    header = snap.parse(encode(["a"], [0], [0.5])).header
    expected = dict(game="test-game", version="v-test", training_config_hash="abc")
    snap.check(header, offer_ids=OFFERS, **expected)
    for field, wrong in [("version", "v-other"), ("training_config_hash", "zzz")]:
        with pytest.raises(snap.SnapshotError, match=field):
            snap.check(header, offer_ids=OFFERS, **{**expected, field: wrong})
    with pytest.raises(snap.SnapshotError, match="offer catalog"):
        snap.check(header, offer_ids=("cheap", "big", "mid"), **expected)


def test_out_of_range_offer_index_is_refused_at_build():
    with pytest.raises(ValueError, match="outside the catalog"):
        encode(["a"], [3], [0.5])


def test_run_folders_sort_in_time_order():
    early = snap.run_folder(datetime(2026, 11, 22, 23, 59, 59, tzinfo=UTC))
    late = snap.run_folder(datetime(2026, 11, 23, 0, 0, 0, tzinfo=UTC))
    assert early < late == "run=20261123T000000Z"


def test_columns_are_aligned_so_a_lookup_never_copies_the_keys():
    for n in (1, 3, 1001):
        snapshot = snap.parse(encode([f"p{i}" for i in range(n)], [0] * n, [0.5] * n))
        assert snapshot.keys.flags.aligned and snapshot.propensities.flags.aligned
        assert snapshot.keys.base is not None  # a view of the file's bytes, not a copy
