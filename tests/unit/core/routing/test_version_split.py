"""The sticky, weighted version split: shares, stickiness, and minimal movement."""

import pytest

from app.core.routing.version_split import VersionSplit, player_point

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

GAME = "galaxy-raiders"
PLAYERS = [f"p{i:07d}" for i in range(10_000)]
PINNED_POINT = 0.45444637982168284


def shares(split: VersionSplit) -> dict[str, float]:
    counts = {v: 0 for v in split.versions}
    for p in PLAYERS:
        counts[split.assign(p)] += 1
    return {v: n / len(PLAYERS) for v, n in counts.items()}


@pytest.mark.parametrize("canary", [0.0, 0.05, 0.1, 0.2, 0.5, 0.9])
def test_observed_split_over_10000_players_is_within_2_points_of_the_weights(canary):
    split = VersionSplit(GAME, ["2026-10", "2026-11"], {"2026-10": 1 - canary, "2026-11": canary})
    observed = shares(split)
    assert abs(observed["2026-11"] - canary) <= 0.02, observed
    assert abs(observed["2026-10"] - (1 - canary)) <= 0.02, observed


def test_a_zero_weight_version_gets_no_players():
    split = VersionSplit(GAME, ["2026-10", "2026-11"], {"2026-10": 1, "2026-11": 0})
    assert {split.assign(p) for p in PLAYERS} == {"2026-10"}


def test_every_player_gets_the_same_version_on_every_login_and_in_every_process():
    weights = {"2026-10": 90, "2026-11": 10}
    first = VersionSplit(GAME, ["2026-10", "2026-11"], weights)
    again = VersionSplit(GAME, ["2026-10", "2026-11"], dict(weights))  # another replica
    assignments = {p: first.assign(p) for p in PLAYERS}
    for _ in range(3):  # repeated logins
        assert all(first.assign(p) == v for p, v in assignments.items())
    assert all(again.assign(p) == v for p, v in assignments.items())
    # The hash is pinned: a code change that would reassign every player fails here.
    assert player_point(GAME, "p0000042", "2026-11") == pytest.approx(PINNED_POINT, abs=1e-15)
    assert player_point(GAME, "p0000042", "2026-11") != player_point(
        "puzzle-harbor", "p0000042", "2026-11"
    )


def test_moving_the_canary_from_10_to_20_percent_moves_only_about_10_percent_of_players():
    versions = ["2026-10", "2026-11"]
    before = VersionSplit(GAME, versions, {"2026-10": 90, "2026-11": 10})
    after = VersionSplit(GAME, versions, {"2026-10": 80, "2026-11": 20})
    moved = [p for p in PLAYERS if before.assign(p) != after.assign(p)]
    assert 0.08 <= len(moved) / len(PLAYERS) <= 0.12, len(moved)
    # ... and every one of them moved onto the canary, none off it.
    assert all(before.assign(p) == "2026-10" and after.assign(p) == "2026-11" for p in moved)


def moved(before: VersionSplit, after: VersionSplit) -> list[tuple[str, str]]:
    return [
        (before.assign(p), after.assign(p)) for p in PLAYERS if before.assign(p) != after.assign(p)
    ]


def test_with_three_versions_raising_one_weight_only_moves_players_onto_it():
    versions = ["a", "b", "c"]
    before = VersionSplit(GAME, versions, {"a": 50, "b": 25, "c": 25})
    after = VersionSplit(GAME, versions, {"a": 50, "b": 25, "c": 40})
    changes = moved(before, after)
    # c's share goes from 25% to 40/115 = 34.8%: ~9.8% of players move, all onto c, taken
    # from a and b in proportion to their shares.
    assert 0.08 <= len(changes) / len(PLAYERS) <= 0.12, len(changes)
    assert {to for _, to in changes} == {"c"}
    assert {frm for frm, _ in changes} == {"a", "b"}


def test_adding_a_version_only_takes_players_onto_it():
    before = VersionSplit(GAME, ["a", "b"], {"a": 90, "b": 10})
    after = VersionSplit(GAME, ["a", "b", "c"], {"a": 90, "b": 10, "c": 10})
    changes = moved(before, after)
    assert 0.07 <= len(changes) / len(PLAYERS) <= 0.11, len(changes)  # 10/110 = 9.1%
    assert {to for _, to in changes} == {"c"}


def test_alternatives_put_the_heaviest_other_version_first():
    split = VersionSplit(GAME, ["a", "b", "c"], {"a": 10, "b": 70, "c": 20})
    assert split.alternatives("a") == ["b", "c"]
    assert split.alternatives("b") == ["c", "a"]


@pytest.mark.parametrize(
    "versions, weights",
    [
        ([], {}),
        (["a", "a"], {"a": 1}),
        (["a"], {"a": 0}),
        (["a"], {"a": -1}),
        (["a", "b"], {"a": float("inf"), "b": 1}),
        (["a"], {"b": 1}),
    ],
)
def test_bad_splits_are_refused(versions, weights):
    with pytest.raises(ValueError):
        VersionSplit(GAME, versions, weights)
