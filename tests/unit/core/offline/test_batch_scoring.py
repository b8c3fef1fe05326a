import numpy as np
import pytest

from app.core.aggregation import MemberScores, weighted_mean
from app.core.offers import OfferCatalog
from app.core.offline.batch_scoring import BatchScorer
from tests.support import small_manifest

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class RowMember:
    """A deterministic member whose score depends on each row alone (as trees do)."""

    def __init__(self, name, seed):
        self.name = name
        self._w = np.random.default_rng(seed).normal(size=5)
        self.calls = []

    def score(self, matrix):
        self.calls.append(matrix.shape)
        return 1.0 / (1.0 + np.exp(-(matrix.astype(np.float64) @ self._w) / 50.0))


def test_batch_decisions_equal_the_online_decision_player_by_player():
    manifest = small_manifest()
    catalog = OfferCatalog(manifest)
    members = [RowMember(f"m{i}", i) for i in range(3)]
    weights = {e.name: e.weight for e in manifest.members}
    rng = np.random.default_rng(7)
    players = np.column_stack(
        [rng.integers(1, 90, 200), rng.random(200) * 300, rng.integers(0, 2, 200)]
    ).astype(np.float32)

    scored = BatchScorer(catalog, members, weights).score(players)

    # One candidate matrix and one predict per member for all 200 players.
    assert all(m.calls == [(600, 5)] for m in members)
    for i, row in enumerate(players):
        candidates = catalog.candidates(row)
        online = catalog.decide(
            weighted_mean(
                [MemberScores(m.name, weights[m.name], m.score(candidates)) for m in members]
            )
        )
        assert catalog.offers[scored.offer_index[i]] == online.offer
        assert abs(scored.propensity[i] - online.propensity) <= 1e-12
        assert abs(scored.expected_revenue[i] - online.expected_revenue) <= 1e-12


def test_decide_many_breaks_ties_towards_the_earlier_offer_like_decide():
    catalog = OfferCatalog(small_manifest())
    prices = catalog.net_prices
    tied = np.array([1.0 / prices[0], 1.0 / prices[1], 0.5 / prices[2]])
    best, _, _ = catalog.decide_many(np.concatenate([tied, tied[::-1]]))
    assert best[0] == 0
    assert catalog.decide(tied).offer == catalog.offers[0]


def test_a_member_without_weight_is_refused():
    catalog = OfferCatalog(small_manifest())
    with pytest.raises(ValueError, match="no weight"):
        BatchScorer(catalog, [RowMember("x", 0)], {"m0": 1.0})
