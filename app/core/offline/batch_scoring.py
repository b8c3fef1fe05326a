"""Scoring a block of players offline: the online decision, vectorized over many players.

The batch job (app.batch) hands this a block of encoded player rows. It builds one candidate
matrix for all of them (players x offers), has every member score it once, and aggregates
and decides with the same functions the online path uses per login (weighted_mean,
OfferCatalog), so a player gets the same offer and propensity from either path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.core.aggregation import MemberScores, weighted_mean
from app.core.offers import OfferCatalog


class Member(Protocol):
    """A loaded member (app.adapters.member_model.MemberModel)."""

    @property
    def name(self) -> str: ...

    def score(self, matrix: np.ndarray) -> np.ndarray: ...


class Members(Protocol):
    """Members scored together (app.adapters.member_model.MemberGroupModel): `score` maps a
    matrix to its (members, rows) scores, in `names` order."""

    @property
    def names(self) -> tuple[str, ...]: ...

    def score(self, matrix: np.ndarray) -> np.ndarray: ...


class SeparateMembers:
    """Single members scored one after another, as one `Members`."""

    def __init__(self, members: Sequence[Member]) -> None:
        self._members = tuple(members)
        self.names = tuple(m.name for m in self._members)

    def score(self, matrix: np.ndarray) -> np.ndarray:
        return np.stack([m.score(matrix) for m in self._members])


@dataclass(frozen=True)
class ScoredPlayers:
    offer_index: np.ndarray  # into the catalog's offers
    propensity: np.ndarray  # float64
    expected_revenue: np.ndarray  # float64, propensity x net price


class BatchScorer:
    def __init__(
        self,
        catalog: OfferCatalog,
        members: Sequence[Member] | Members,
        weights: dict[str, float],
    ) -> None:
        scored = SeparateMembers(members) if isinstance(members, Sequence) else members
        if not scored.names:
            raise ValueError("a batch scorer needs at least one member")
        missing = [n for n in scored.names if n not in weights]
        if missing:
            raise ValueError(f"no weight for members {missing}")
        self.catalog = catalog
        self.members = scored
        self.weights = dict(weights)

    def score(self, player_rows: np.ndarray) -> ScoredPlayers:
        """Each player's best offer; `player_rows` is (n, player width), encoded."""
        candidates = self.catalog.candidates(player_rows)
        scores = self.members.score(candidates)
        answers = [
            MemberScores(name, self.weights[name], row)
            for name, row in zip(self.members.names, scores, strict=True)
        ]
        best, propensity, revenue = self.catalog.decide_many(weighted_mean(answers))
        return ScoredPlayers(best, propensity, revenue)
