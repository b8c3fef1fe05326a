"""The known purchase function of the synthetic population: what the members try to learn.

It works on encoded rows (exactly what members see), so its AUC on held-out impressions is the
ceiling any member can reach: the oracle AUC reported in every manifest.
"""

from __future__ import annotations

import numpy as np

from models.catalog import CATEGORIES, OFFER_FEATURES
from models.features import PLATFORMS, feature_schema

_PLAYER = {spec.name: i for i, spec in enumerate(feature_schema().player_features)}
_OFFER = {name: i for i, name in enumerate(OFFER_FEATURES)}
_CATEGORY = {name: float(code) for code, name in enumerate(CATEGORIES)}
_IOS = float(PLATFORMS.index("ios"))

# Chosen so that conversion is a few percent overall: ~2% for cheap offers shown to inactive
# non-payers, well above 15% for discounted offers shown to recent spenders.
_INTERCEPT = -3.55


def purchase_probability(
    player_rows: np.ndarray, offer_rows: np.ndarray, window: int = 0
) -> np.ndarray:
    """P(purchase) for each (player, offer) row pair; rows are encoded and row-aligned."""
    if player_rows.shape[0] != offer_rows.shape[0]:
        raise ValueError("player_rows and offer_rows must have the same number of rows")
    p = {name: player_rows[:, i].astype(np.float64) for name, i in _PLAYER.items()}
    o = {name: offer_rows[:, i].astype(np.float64) for name, i in _OFFER.items()}

    spend_total = np.log1p(np.maximum(p["spend_total"], 0.0))
    recency = np.exp(-np.maximum(p["days_since_last_purchase"], 0.0) / 30.0)
    engagement = np.log1p(np.maximum(p["sessions_7d"], 0.0))
    # Players who never spent much react strongly to price and discount; whales barely do.
    sensitivity = 1.0 / (1.0 + 0.5 * spend_total)
    # Above 1 for non-spenders, so cheap offers earn most from them; whales favour big packs.
    price_elasticity = 0.3 + 1.0 * sensitivity
    drift = 1.0 + 0.05 * window  # later windows: promotions grow more effective

    logit = (
        _INTERCEPT
        + 0.02 * window
        + 0.25 * spend_total
        + 0.20 * np.log1p(np.maximum(p["spend_28d"], 0.0))
        + 0.60 * recency
        + 0.30 * engagement
        - 0.25 * (p["country_tier"] - 1.0)
        + o["discount"] * (0.4 + 2.2 * sensitivity) * drift
        - np.log(np.maximum(o["net_price"], 0.01)) * price_elasticity
        + 0.35 * (o["value_ratio"] - 1.0)
        + _category_affinity(p, o["category_code"], window)
    )
    return 1.0 / (1.0 + np.exp(-logit))


def _category_affinity(p: dict[str, np.ndarray], category: np.ndarray, window: int) -> np.ndarray:
    """Which kind of offer appeals to whom: depends on platform, level, age and engagement."""
    ios = p["platform"] == _IOS
    level = p["level"]
    days = p["days_since_install"]
    engagement = np.log1p(np.maximum(p["sessions_7d"], 0.0))
    # Cosmetics sell on iOS, increasingly so over time; Android players prefer soft currency.
    by_category = {
        "gems": 0.15 + 0.35 * (level > 40),
        "coins": np.where(ios, -0.15, 0.30) + 0.25 * (level < 15),
        "booster": 0.6 / (1.0 + np.exp(-(level - 30.0) / 6.0)) - 0.2,
        "skin": np.where(ios, 0.45 + 0.05 * window, -0.35),
        "bundle": np.where(days < 14, 0.9, -0.1),
        "pass": 0.25 * engagement - 0.45,
    }
    affinity = np.zeros_like(level)
    for name, value in by_category.items():
        affinity = np.where(category == _CATEGORY[name], value, affinity)
    return affinity
