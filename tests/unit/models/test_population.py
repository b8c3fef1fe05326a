"""The synthetic population: deterministic players, catalogs, the ground-truth purchases."""

from __future__ import annotations

import re

import numpy as np
import pytest

from app.contract.manifest import Offer
from models.catalog import CATEGORIES, GAMES, OFFER_FEATURES, catalog_offers
from models.features import feature_schema
from models.population import (
    BLOCK_SIZE,
    generate_players,
    impression_log,
    player_id,
    purchase_probability,
)

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
GAME = "galaxy-raiders"


def test_player_ids_are_valid_and_follow_the_index() -> None:
    players = generate_players(GAME, 50)
    assert [p["player_id"] for p in players] == [player_id(i) for i in range(50)]
    assert player_id(42) == "p0000042"
    assert all(ID_PATTERN.match(p["player_id"]) for p in players)


@pytest.mark.parametrize("game", GAMES)
def test_generation_is_prefix_stable(game: str) -> None:
    assert generate_players(game, 100)[:10] == generate_players(game, 10)
    # Across a block boundary as well.
    assert generate_players(game, 2 * BLOCK_SIZE + 5)[: BLOCK_SIZE + 3] == generate_players(
        game, BLOCK_SIZE + 3
    )


def test_generation_is_deterministic_and_depends_on_game_and_seed() -> None:
    assert generate_players(GAME, 300) == generate_players(GAME, 300)
    assert generate_players(GAME, 300) != generate_players("puzzle-harbor", 300)
    assert generate_players(GAME, 300) != generate_players(GAME, 300, seed=7)


def test_later_windows_show_the_same_players_older_and_drifted() -> None:
    first = generate_players(GAME, 2000, window=0)
    later = generate_players(GAME, 2000, window=2)
    for a, b in zip(first, later, strict=True):
        assert a["player_id"] == b["player_id"]
        for lasting in ("platform", "country_tier"):
            if lasting in a and lasting in b:
                assert a[lasting] == b[lasting]
        if "days_since_install" in a and "days_since_install" in b:
            assert b["days_since_install"] - a["days_since_install"] == 14
    changed = sum(
        a.get("sessions_7d") != b.get("sessions_7d") for a, b in zip(first, later, strict=True)
    )
    assert changed > 0.5 * len(first)


def test_about_three_percent_of_values_are_absent() -> None:
    players = generate_players(GAME, 5000)
    names = [spec.name for spec in feature_schema().player_features]
    missing = sum(name not in p for p in players for name in names)
    assert 0.02 < missing / (len(players) * len(names)) < 0.04


def test_absent_values_encode_to_the_schema_defaults() -> None:
    schema = feature_schema()
    row = schema.encode_record({"player_id": player_id(0)})
    defaults = [
        spec.categories.index(spec.default) if spec.kind == "category" else spec.default
        for spec in schema.player_features
    ]
    assert row.tolist() == pytest.approx(defaults)


def test_values_are_plain_python_types() -> None:
    for player in generate_players(GAME, 200):
        for name, value in player.items():
            expected = str if name in ("player_id", "platform") else (int, float)
            assert isinstance(value, expected), (name, value)


def test_schema_shape() -> None:
    schema = feature_schema()
    assert schema.version == "fs-1"
    assert schema.offer_features == OFFER_FEATURES
    assert schema.player_width >= 12
    assert schema.column_names[-len(OFFER_FEATURES) :] == list(OFFER_FEATURES)


def test_unknown_game_is_a_clear_key_error() -> None:
    with pytest.raises(KeyError, match="unknown game 'space-farm'"):
        catalog_offers("space-farm")
    with pytest.raises(KeyError, match="unknown game"):
        generate_players("space-farm", 3)


@pytest.mark.parametrize("game", GAMES)
def test_catalogs_are_complete_and_valid(game: str) -> None:
    offers = catalog_offers(game)
    assert len(offers) >= 8
    assert len({o.offer_id for o in offers}) == len(offers)
    for offer in offers:
        assert ID_PATTERN.match(offer.offer_id)
        assert offer.category in CATEGORIES
        assert 0.99 <= offer.price <= 49.99 and 0 <= offer.discount <= 0.7
        features = dict(zip(OFFER_FEATURES, offer.features, strict=True))
        assert features["net_price"] == offer.net_price
        # The manifest's Offer accepts it and computes the same net price.
        manifest_offer = Offer(
            offer_id=offer.offer_id,
            item=offer.item,
            category=offer.category,
            price=offer.price,
            discount=offer.discount,
            features=list(offer.features),
            prior_propensity=0.05,
        )
        assert manifest_offer.net_price == offer.net_price


def _player(**values: float | str) -> np.ndarray:
    base: dict = {"level": 35, "days_since_install": 120, "sessions_7d": 6, "country_tier": 2}
    return feature_schema().encode_record(base | values)


def _offer(price: float, discount: float, category: str = "gems", value_ratio: float = 1.0):
    net = price * (1 - discount)
    return np.array([price, discount, net, CATEGORIES.index(category), value_ratio], np.float32)


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def test_ground_truth_probabilities_are_in_the_open_unit_interval() -> None:
    log = impression_log(GAME, 20_000, window=0, seed=5, offers=catalog_offers(GAME))
    width = feature_schema().player_width
    p = purchase_probability(log.X[:, :width], log.X[:, width:])
    assert np.all((p > 0) & (p < 1))
    assert np.array_equal(p, log.p_true)
    assert 0.02 < p.mean() < 0.15


def test_discounts_help_price_sensitive_players_most() -> None:
    players = np.stack([_player(), _player(spend_total=400.0, spend_28d=60.0, purchases_total=30)])
    full = np.stack([_offer(9.99, 0.0)] * 2)
    # Same net price, but presented as a 50% discount.
    discounted = np.stack([_offer(19.98, 0.5)] * 2)
    lift = _logit(purchase_probability(players, discounted)) - _logit(
        purchase_probability(players, full)
    )
    non_spender, spender = lift
    assert non_spender > spender > 0


def test_spenders_buy_more_and_price_hurts() -> None:
    players = np.stack([_player(), _player(spend_total=400.0, spend_28d=60.0, purchases_total=30)])
    cheap = purchase_probability(players, np.stack([_offer(1.99, 0.0)] * 2))
    dear = purchase_probability(players, np.stack([_offer(19.99, 0.0)] * 2))
    assert cheap[1] > cheap[0] and dear[1] > dear[0]
    assert np.all(dear < cheap)


def test_skins_sell_better_on_ios() -> None:
    players = np.stack([_player(platform="android"), _player(platform="ios")])
    skins = np.stack([_offer(4.99, 0.0, "skin")] * 2)
    android, ios = purchase_probability(players, skins)
    assert ios > android


def test_impressions_follow_the_schema_column_order() -> None:
    offers = catalog_offers(GAME)
    log = impression_log(GAME, 5000, window=1, seed=3, offers=offers, pool_size=2000)
    schema = feature_schema()
    assert log.X.shape == (5000, schema.row_width) and log.X.dtype == np.float32
    assert log.y.dtype == np.int8 and set(np.unique(log.y)) <= {0, 1}
    assert log.p_true.dtype == np.float64
    players = schema.encode_records(generate_players(GAME, 2000, window=1))
    assert np.array_equal(log.X[:, : schema.player_width], players[log.player_index])
    offer_rows = np.array([o.features for o in offers], np.float32)
    assert np.array_equal(log.X[:, schema.player_width :], offer_rows[log.offer_index])


def test_impressions_are_deterministic_per_seed() -> None:
    offers = catalog_offers(GAME)
    a, b, c = (
        impression_log(GAME, 3000, window=2, seed=seed, offers=offers) for seed in (9, 9, 10)
    )
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("X", "y", "p_true"))
    assert not np.array_equal(a.X, c.X)
