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
        best, propensity, revenue = self.decide_many(propensities)
        return OfferDecision(self.offers[best[0]], float(propensity[0]), float(revenue[0]))

    def decide_many(self, propensities: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`decide` for n players at once, vectorized (the batch job; online uses n = 1).

        `propensities`: n x K scores, player-major as in `candidates`. Returns each player's
        best offer index, its propensity and its expected revenue.
        """
        k = len(self.offers)
        if propensities.size % k:
            raise ValueError(f"{propensities.size} propensities are not whole rows of {k}")
        scores = propensities.reshape(-1, k)
        revenue = scores * self.net_prices
        best = np.argmax(revenue, axis=1)  # ties go to the earlier catalog entry
        rows = np.arange(scores.shape[0])
        return best, scores[rows, best], revenue[rows, best]

    def fallback(self) -> OfferDecision:
        """The non-personalized offer, reported with its population conversion rate."""
        offer = self.fallback_offer
        return OfferDecision(
            offer, offer.prior_propensity, offer.prior_propensity * offer.net_price
        )
