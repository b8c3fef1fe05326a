"""The feature schema "fs-1": which player features members see, their defaults and order."""

from __future__ import annotations

from functools import cache

from app.contract.feature_schema import FeatureSchema, FeatureSpec
from models.catalog import OFFER_FEATURES

SCHEMA_VERSION = "fs-1"
PLATFORMS: tuple[str, ...] = ("android", "ios")

# Defaults describe a player we know nothing about: a fresh, inactive non-payer. A missing
# days_since_last_purchase means "never purchased", which the 365-day cap also stands for.
_PLAYER_FEATURES: tuple[tuple[str, float], ...] = (
    ("level", 1.0),
    ("days_since_install", 0.0),
    ("sessions_1d", 0.0),
    ("sessions_7d", 0.0),
    ("sessions_28d", 0.0),
    ("minutes_7d", 0.0),
    ("spend_7d", 0.0),
    ("spend_28d", 0.0),
    ("spend_total", 0.0),
    ("purchases_total", 0.0),
    ("days_since_last_purchase", 365.0),
    ("friends", 0.0),
    ("country_tier", 2.0),  # 1 = highest-ARPU markets, 3 = lowest
)


@cache
def feature_schema() -> FeatureSchema:
    """The schema every member of every version is trained and served with."""
    numeric = tuple(FeatureSpec(name=n, kind="numeric", default=d) for n, d in _PLAYER_FEATURES)
    platform = FeatureSpec(
        name="platform", kind="category", default="android", categories=PLATFORMS
    )
    return FeatureSchema(
        version=SCHEMA_VERSION,
        player_features=(*numeric, platform),
        offer_features=OFFER_FEATURES,
    )


def column(name: str) -> int:
    """Index of a feature in a full (player + offer) encoded row."""
    return feature_schema().column_names.index(name)
