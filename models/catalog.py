"""Offer catalogs of the games the service knows, and the numeric features members see per offer."""

from __future__ import annotations

from dataclasses import dataclass

GAMES: tuple[str, ...] = ("galaxy-raiders", "puzzle-harbor")

# The position in this tuple is the offer's category_code feature, so only ever append.
CATEGORIES: tuple[str, ...] = ("gems", "coins", "booster", "skin", "bundle", "pass")

OFFER_FEATURES: tuple[str, ...] = ("price", "discount", "net_price", "category_code", "value_ratio")


@dataclass(frozen=True)
class CatalogOffer:
    """One offer as the game's store defines it."""

    offer_id: str
    item: str
    category: str
    price: float  # list price in USD
    discount: float  # fraction taken off the list price
    value_ratio: float  # in-game value per dollar, relative to the game's smallest pack

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.offer_id}: unknown category {self.category!r}")
        if not (self.price > 0 and 0 <= self.discount <= 0.7 and self.value_ratio > 0):
            raise ValueError(f"{self.offer_id}: price, discount or value_ratio out of range")

    @property
    def net_price(self) -> float:
        # Same formula as app.contract.manifest.Offer.net_price: serving and training agree.
        return self.price * (1.0 - self.discount)

    @property
    def category_code(self) -> int:
        return CATEGORIES.index(self.category)

    @property
    def features(self) -> tuple[float, ...]:
        """Values in OFFER_FEATURES order."""
        return (
            self.price,
            self.discount,
            self.net_price,
            float(self.category_code),
            self.value_ratio,
        )


_CATALOGS: dict[str, tuple[CatalogOffer, ...]] = {
    "galaxy-raiders": (
        CatalogOffer("gr-gems-small", "Handful of Gems", "gems", 0.99, 0.0, 1.0),
        CatalogOffer("gr-gems-medium", "Pouch of Gems", "gems", 4.99, 0.0, 1.1),
        CatalogOffer("gr-gems-large", "Chest of Gems", "gems", 19.99, 0.2, 1.35),
        CatalogOffer("gr-coins-stack", "Stack of Credits", "coins", 1.99, 0.0, 1.0),
        CatalogOffer("gr-booster-xp", "XP Overdrive (24h)", "booster", 2.99, 0.3, 1.2),
        CatalogOffer("gr-skin-nebula", "Nebula Hull Skin", "skin", 7.99, 0.0, 1.0),
        CatalogOffer("gr-skin-solar", "Solar Flare Skin", "skin", 3.99, 0.25, 1.0),
        CatalogOffer("gr-starter-bundle", "Starter Fleet Bundle", "bundle", 4.99, 0.5, 2.5),
        CatalogOffer("gr-mega-bundle", "Admiral's Mega Bundle", "bundle", 49.99, 0.4, 1.8),
        CatalogOffer("gr-season-pass", "Season Pass", "pass", 9.99, 0.0, 1.5),
    ),
    "puzzle-harbor": (
        CatalogOffer("ph-coins-small", "Coin Purse", "coins", 0.99, 0.0, 1.0),
        CatalogOffer("ph-coins-medium", "Coin Chest", "coins", 4.99, 0.1, 1.15),
        CatalogOffer("ph-coins-large", "Coin Vault", "coins", 14.99, 0.15, 1.3),
        CatalogOffer("ph-gems-small", "Pearl Pack", "gems", 2.99, 0.0, 1.0),
        CatalogOffer("ph-gems-large", "Pearl Treasure", "gems", 24.99, 0.3, 1.4),
        CatalogOffer("ph-booster-moves", "Extra Moves x5", "booster", 0.99, 0.0, 1.0),
        CatalogOffer("ph-booster-crate", "Power-Up Crate", "booster", 3.99, 0.2, 1.2),
        CatalogOffer("ph-skin-lighthouse", "Lighthouse Theme", "skin", 5.99, 0.0, 1.0),
        CatalogOffer("ph-welcome-bundle", "Welcome Aboard Bundle", "bundle", 2.99, 0.6, 2.8),
        CatalogOffer("ph-harbor-pass", "Harbor Pass", "pass", 7.99, 0.0, 1.5),
    ),
}


def check_game(game: str) -> str:
    """Return `game` if it is known; a KeyError naming the known games otherwise."""
    if game not in _CATALOGS:
        raise KeyError(f"unknown game {game!r}; known games: {', '.join(GAMES)}")
    return game


def catalog_offers(game: str) -> tuple[CatalogOffer, ...]:
    """The game's offers, in a fixed order (impression sampling indexes into it)."""
    return _CATALOGS[check_game(game)]
