import numpy as np
import pytest

from app.core.offers import OfferCatalog
from tests.support import small_manifest

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.fixture
def catalog():
    return OfferCatalog(small_manifest())


def test_candidates_are_player_features_then_offer_features(catalog):
    player = np.array([12.0, 3.5, 1.0], np.float32)
    rows = catalog.candidates(player)
    assert rows.shape == (3, 5)
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows[:, :3], np.tile(player, (3, 1)))
    np.testing.assert_allclose(rows[:, 3:], [[0.99, 0.0], [4.99, 0.2], [19.99, 0.5]], rtol=1e-6)


def test_candidates_for_many_players_are_player_major(catalog):
    players = np.array([[1, 0, 0], [2, 0, 1]], np.float32)
    rows = catalog.candidates(players)
    assert rows.shape == (6, 5)
    np.testing.assert_array_equal(rows[:3, 0], [1, 1, 1])
    np.testing.assert_array_equal(rows[3:, 0], [2, 2, 2])


def test_decision_maximizes_expected_revenue_not_propensity(catalog):
    # net prices: 0.99, 3.992, 9.995. The cheap offer is the most likely to sell but the big
    # one earns the most in expectation: 0.1 * 9.995 > 0.5 * 0.99 and > 0.2 * 3.992.
    decision = catalog.decide(np.array([0.5, 0.2, 0.1]))
    assert decision.offer.offer_id == "big"
    assert decision.propensity == pytest.approx(0.1)
    assert decision.expected_revenue == pytest.approx(0.1 * 19.99 * 0.5)


def test_decision_tie_goes_to_first_offer(catalog):
    net = catalog.net_prices
    propensities = np.array([1.0 / net[0], 1.0 / net[1], 0.0]) * 0.1
    assert catalog.decide(propensities).offer.offer_id == "cheap"


def test_decision_refuses_wrong_number_of_propensities(catalog):
    with pytest.raises(ValueError, match="expected 3 propensities"):
        catalog.decide(np.array([0.1, 0.2]))


def test_fallback_is_the_manifest_offer_with_its_prior(catalog):
    decision = catalog.fallback()
    assert decision.offer.offer_id == "mid"
    assert decision.propensity == pytest.approx(0.05)
    assert decision.expected_revenue == pytest.approx(0.05 * 4.99 * 0.8)
