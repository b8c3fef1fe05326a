"""The precomputed tier: last batch run's offer for a player, when the online path fails.

The batch job (app.batch) scores every player with the same members and writes a snapshot
(app.contract.offer_snapshot). A supervisor holds its version's snapshot in memory, so the
tier answers while DynamoDB itself is down. A snapshot older than the configured maximum age
stops answering (players get the default offer again) rather than serving stale offers
forever; a newer run replaces it in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.contract.offer_snapshot import OfferSnapshot, snapshot_key
from app.core.offers import OfferCatalog, OfferDecision


@dataclass(frozen=True)
class PrecomputedOffers:
    """One loaded snapshot, bound to the catalog its offer indices point into."""

    snapshot: OfferSnapshot
    catalog: OfferCatalog
    source: str  # where it was loaded from, for logs and GET /v1/ensemble

    @property
    def scored_at_s(self) -> float:
        return self.snapshot.header.scored_at.timestamp()

    def decision(self, player_id: str) -> OfferDecision | None:
        row = self.snapshot.find(snapshot_key(player_id))
        if row is None:
            return None
        offer = self.catalog.offers[int(self.snapshot.offers[row])]
        propensity = float(self.snapshot.propensities[row])
        return OfferDecision(offer, propensity, propensity * offer.net_price)


class PrecomputedTier:
    """The snapshot a replica answers from (none until one is installed)."""

    def __init__(self, max_age_s: float, clock: Callable[[], float] = time.time) -> None:
        if max_age_s <= 0:
            raise ValueError(f"max_age_s must be positive, got {max_age_s}")
        self.max_age_s = max_age_s
        self._clock = clock
        self._offers: PrecomputedOffers | None = None

    @property
    def offers(self) -> PrecomputedOffers | None:
        return self._offers

    def install(self, offers: PrecomputedOffers) -> None:
        """Swap in a snapshot: one reference assignment, so lookups never see half of one."""
        self._offers = offers

    def age_s(self) -> float | None:
        offers = self._offers
        return None if offers is None else self._clock() - offers.scored_at_s

    def fresh(self) -> bool:
        age = self.age_s()
        return age is not None and age <= self.max_age_s

    def lookup(self, player_id: str) -> OfferDecision | None:
        """The player's precomputed offer, or None (no snapshot, too old, or not in it)."""
        offers = self._offers
        if offers is None or self._clock() - offers.scored_at_s > self.max_age_s:
            return None
        return offers.decision(player_id)
