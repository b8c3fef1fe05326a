"""Which ensemble version answers a player: a weighted split that is sticky by player.

Each player has a fixed point in [0, 1): a stable hash of (game, player id). The versions
own consecutive ranges of [0, 1) in their configured order, each as wide as its share of the
weights, and a player goes to the version whose range holds their point. So:
- the same player gets the same version on every login, on every replica, after restarts,
  for as long as the weights stay the same (no state, no coordination);
- changing weights moves only the players whose points change owner. With the canary last,
  growing it from 10% to 20% moves the players in [0.8, 0.9) and nobody else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

_SCALE = float(2**64)


def player_point(game: str, player_id: str) -> float:
    """The player's fixed point in [0, 1): uniform over players, the same in every process."""
    digest = hashlib.blake2b(f"{game}\x00{player_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


class VersionSplit:
    """Weighted, sticky assignment of a game's players to its versions."""

    def __init__(self, game: str, versions: Sequence[str], weights: Mapping[str, float]) -> None:
        """`versions` in range order (stable first, canary last); a version missing from
        `weights` gets weight 0."""
        if not versions or len(set(versions)) != len(versions):
            raise ValueError(f"versions must be distinct and not empty, got {list(versions)}")
        unknown = sorted(set(weights) - set(versions))
        if unknown:
            raise ValueError(f"weights name unknown versions {unknown}")
        if any(not w >= 0 for w in weights.values()):
            raise ValueError(f"weights must be >= 0, got {dict(weights)}")
        total = sum(weights.values())
        if total <= 0:
            raise ValueError("at least one version needs a positive weight")
        self.game = game
        self.versions = tuple(versions)
        self.weights = {v: float(weights.get(v, 0.0)) for v in versions}
        # Upper ends of each version's range; the last is exactly 1.0.
        ends: list[float] = []
        acc = 0.0
        for v in versions:
            acc += self.weights[v] / total
            ends.append(acc)
        ends[-1] = 1.0
        self._ends = ends

    def shares(self) -> dict[str, float]:
        total = sum(self.weights.values())
        return {v: w / total for v, w in self.weights.items()}

    def assign(self, player_id: str) -> str:
        point = player_point(self.game, player_id)
        for version, end in zip(self.versions, self._ends, strict=True):
            if point < end and self.weights[version] > 0:
                return version
        # Only reachable through float rounding at a range's edge: the last weighted version.
        return [v for v in self.versions if self.weights[v] > 0][-1]

    def alternatives(self, version: str) -> list[str]:
        """Where `version`'s players go when it cannot answer: the other versions, those
        with the most weight first, then those with none (still better than no answer)."""
        others = [v for v in self.versions if v != version]
        return sorted(others, key=lambda v: -self.weights[v])
