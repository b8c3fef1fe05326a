"""Which ensemble version answers a player: a weighted split that is sticky by player.

Weighted rendezvous hashing: each (game, player, version) has a fixed hash u in (0, 1), and
the player goes to the version with the lowest -ln(u) / weight. The lowest of independent
exponential draws with rates w_v is version v with probability w_v / sum(w), so:
- each version gets its weight's share of the players;
- the same player gets the same version on every login, on every router replica, after
  restarts, for as long as the weights stay the same (no state, no coordination);
- a change moves only the players it must: raising one version's weight only moves players
  onto it (10% -> 20% canary moves ~10% of players, all onto the canary), lowering it only
  moves its own players off, and adding a version only takes players onto the new one,
  however many versions there are.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

_SCALE = float(2**64)


def player_point(game: str, player_id: str, version: str = "") -> float:
    """A fixed point in (0, 1) for (game, player, version): uniform, the same in every process."""
    key = f"{game}\x00{player_id}\x00{version}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / _SCALE


class VersionSplit:
    """Weighted, sticky assignment of a game's players to its versions."""

    def __init__(self, game: str, versions: Sequence[str], weights: Mapping[str, float]) -> None:
        """`versions` as configured (stable first); a version missing from `weights` gets
        weight 0 and no players."""
        if not versions or len(set(versions)) != len(versions):
            raise ValueError(f"versions must be distinct and not empty, got {list(versions)}")
        unknown = sorted(set(weights) - set(versions))
        if unknown:
            raise ValueError(f"weights name unknown versions {unknown}")
        if any(not 0 <= w < math.inf for w in weights.values()):
            raise ValueError(f"weights must be finite and >= 0, got {dict(weights)}")
        if sum(weights.values()) <= 0:
            raise ValueError("at least one version needs a positive weight")
        self.game = game
        self.versions = tuple(versions)
        self.weights = {v: float(weights.get(v, 0.0)) for v in versions}
        self._weighted = [v for v in self.versions if self.weights[v] > 0]

    def shares(self) -> dict[str, float]:
        total = sum(self.weights.values())
        return {v: w / total for v, w in self.weights.items()}

    def assign(self, player_id: str) -> str:
        return min(
            self._weighted,
            key=lambda v: -math.log(player_point(self.game, player_id, v)) / self.weights[v],
        )

    def alternatives(self, version: str) -> list[str]:
        """Where `version`'s players go when it cannot answer: the other versions, those
        with the most weight first, then those with none (still better than no answer)."""
        others = [v for v in self.versions if v != version]
        return sorted(others, key=lambda v: -self.weights[v])
