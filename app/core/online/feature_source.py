"""What the offer service needs from a feature store (implemented in app.adapters.dynamodb)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from app.contract.feature_schema import FeatureValue


class FeatureStoreUnavailable(RuntimeError):
    """The feature store could not answer: error, throttling, timeout or an open circuit."""


class FeatureSource(Protocol):
    def cached_row(
        self, player_id: str, overrides: Mapping[str, FeatureValue] | None = None
    ) -> np.ndarray | None:
        """The player's row if the store holds it in memory right now, else None (no I/O)."""
        ...

    async def player_row(
        self, player_id: str, overrides: Mapping[str, FeatureValue] | None = None
    ) -> np.ndarray | None:
        """The player's encoded feature row, or None if the player is unknown.

        Raises:
            FeatureStoreUnavailable: the store could not answer.
        """
        ...
