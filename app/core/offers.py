"""The offer catalog as matrices, candidate rows, and the expected-revenue decision."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.contract.manifest import Manifest, Offer


@dataclass(frozen=True)
class OfferDecision:
    offer: Offer
    propensity: float
    expected_revenue: float


class OfferCatalog:
    """A version's offers, pre-packed so candidate rows are one broadcast copy per player."""

    def __init__(self, manifest: Manifest) -> None:
        self.offers: tuple[Offer, ...] = tuple(manifest.offers)
        self.fallback_offer = manifest.fallback_offer
        self._schema = manifest.feature_schema
        self.player_width = manifest.feature_schema.player_width
        self.offer_features = np.array([o.features for o in self.offers], dtype=np.float32)
        self.net_prices = np.array([o.net_price for o in self.offers], dtype=np.float64)

    @property
    def row_width(self) -> int:
        return self.player_width + int(self.offer_features.shape[1])

    def candidates(self, player_rows: np.ndarray) -> np.ndarray:
        """Candidate matrix for n players: K rows per player, player-major (see
        FeatureSchema.candidate_rows)."""
        return self._schema.candidate_rows(player_rows, self.offer_features)

    def decide(self, propensities: np.ndarray) -> OfferDecision:
        """Pick the offer with the highest expected revenue (propensity x net price)."""
        if propensities.shape != (len(self.offers),):
            raise ValueError(f"expected {len(self.offers)} propensities, got {propensities.shape}")
        revenue = propensities * self.net_prices
        best = int(np.argmax(revenue))  # ties go to the earlier catalog entry
        return OfferDecision(self.offers[best], float(propensities[best]), float(revenue[best]))

    def fallback(self) -> OfferDecision:
        """The non-personalized offer, reported with its population conversion rate."""
        offer = self.fallback_offer
        return OfferDecision(
            offer, offer.prior_propensity, offer.prior_propensity * offer.net_price
        )
