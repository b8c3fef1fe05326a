"""A deterministic synthetic player population per game, and the impressions it generates.

Players are generated in fixed blocks, each from its own seeded stream, so the first n players
are the same whatever the population size. A player's lasting traits (engagement, taste for
spending, platform, install date) depend only on (seed, game, block); what is observed in a data
`window` (one week per window) adds a window-specific stream, so later windows show the same
players, a little older and with drifted activity and spend.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from models.catalog import check_game
from models.features import PLATFORMS, feature_schema
from models.ground_truth import purchase_probability

__all__ = [
    "POPULATION_SEED",
    "ImpressionLog",
    "feature_schema",
    "generate_players",
    "impression_log",
    "player_id",
    "purchase_probability",
]

POPULATION_SEED = 20261
BLOCK_SIZE = 1024
MISSING_RATE = 0.03
DEFAULT_POOL_SIZE = 20_000

# Per-game flavour: share of iOS players and how spend-happy the audience is.
_IOS_SHARE = {"galaxy-raiders": 0.38, "puzzle-harbor": 0.50}
_SPEND_SHIFT = {"galaxy-raiders": 0.1, "puzzle-harbor": -0.1}

_FEATURE_NAMES = tuple(spec.name for spec in feature_schema().player_features)


def player_id(index: int) -> str:
    return f"p{index:07d}"


def game_number(game: str) -> int:
    """Stable per-game seed component (Python's hash() is salted per process)."""
    return zlib.crc32(check_game(game).encode())


def generate_players(
    game: str, n: int, *, seed: int = POPULATION_SEED, window: int = 0
) -> list[dict]:
    """The first `n` players of the game as observed in `window`; ~3% of values are absent."""
    if n < 0 or window < 0:
        raise ValueError("n and window must be non-negative")
    players: list[dict] = []
    for block in range((n + BLOCK_SIZE - 1) // BLOCK_SIZE):
        players.extend(_block(game, block, seed, window))
    return players[:n]


def _block(game: str, block: int, seed: int, window: int) -> list[dict]:
    number = game_number(game)
    traits = _lasting_traits(game, np.random.default_rng((seed, number, block, 0)))
    observed = np.random.default_rng((seed, number, block, 1, window))
    columns = _observe(traits, window, observed)
    present = observed.random((BLOCK_SIZE, len(_FEATURE_NAMES))) >= MISSING_RATE
    # .tolist() turns numpy scalars into plain int/float/str, as a feature store would return.
    values = [columns[name].tolist() for name in _FEATURE_NAMES]
    first = block * BLOCK_SIZE
    players = []
    for i in range(BLOCK_SIZE):
        player: dict = {"player_id": player_id(first + i)}
        for j, name in enumerate(_FEATURE_NAMES):
            if present[i, j]:
                player[name] = values[j][i]
        players.append(player)
    return players


@dataclass(frozen=True)
class _Traits:
    """What a player is, independent of the data window: one value per player of a block."""

    engagement: np.ndarray
    spendiness: np.ndarray
    ios: np.ndarray
    tier: np.ndarray
    install_age: np.ndarray  # days since install at window 0
    payer: np.ndarray
    ticket: np.ndarray  # typical purchase, USD
    level_pace: np.ndarray
    friends: np.ndarray


def _lasting_traits(game: str, rng: np.random.Generator) -> _Traits:
    n = BLOCK_SIZE
    engagement = rng.normal(size=n)
    spendiness = 0.5 * engagement + np.sqrt(0.75) * rng.normal(size=n) + _SPEND_SHIFT[game]
    ios = rng.random(n) < _IOS_SHARE[game]
    tier = rng.choice([1, 2, 3], size=n, p=[0.25, 0.40, 0.35])
    payer_logit = 1.6 * spendiness + 0.5 * ios - 0.4 * (tier - 2) - 1.8
    return _Traits(
        engagement=engagement,
        spendiness=spendiness,
        ios=ios,
        tier=tier,
        install_age=rng.gamma(1.2, 110.0, size=n),
        payer=rng.random(n) < 1.0 / (1.0 + np.exp(-payer_logit)),
        ticket=np.exp(1.3 + 0.5 * spendiness + 0.2 * rng.normal(size=n)),
        level_pace=np.exp(0.3 * engagement + 0.2 * rng.normal(size=n)),
        friends=rng.poisson(np.exp(0.8 + 0.6 * engagement)),
    )


def _observe(t: _Traits, window: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Feature values seen in `window`: players are a week older per window, play a little less
    as they age, and a per-window shock moves each player's activity and spend."""
    n = BLOCK_SIZE
    days = t.install_age + 7.0 * window
    shock = 0.2 * rng.normal(size=n)
    activity = np.exp(0.6 * t.engagement - 0.15 * np.log1p(days / 30.0) + shock + 0.02 * window)
    sessions_7d = rng.poisson(6.0 * activity)
    minutes_per_session = rng.gamma(4.0, 2.5, size=n)

    spend_rate = np.exp(0.6 * t.spendiness)
    purchases_total = np.where(t.payer, 1 + rng.poisson((1.0 + days / 30.0) * 0.6 * spend_rate), 0)
    recent_rate = np.where(t.payer, 0.8 * spend_rate * activity * (1 + 0.02 * window), 0.0)
    purchases_28d = np.minimum(rng.poisson(recent_rate), purchases_total)
    purchases_7d = rng.binomial(purchases_28d, 0.3)
    spend_total = np.round(purchases_total * t.ticket * rng.uniform(0.8, 1.2, size=n), 2)
    spend_28d = np.round(np.minimum(purchases_28d * t.ticket, spend_total), 2)
    last_purchase = np.where(
        purchases_28d > 0,
        rng.integers(0, 28, size=n),
        np.minimum(28 + rng.exponential(60.0, size=n), days),
    )
    return {
        "level": np.minimum(1 + np.floor(4.0 * t.level_pace * np.sqrt(days)), 200).astype(int),
        "days_since_install": np.floor(days).astype(int),
        "sessions_1d": rng.binomial(sessions_7d, 0.16),
        "sessions_7d": sessions_7d,
        "sessions_28d": sessions_7d + rng.poisson(18.0 * activity),
        "minutes_7d": np.round(sessions_7d * minutes_per_session, 1),
        "spend_7d": np.round(np.minimum(purchases_7d * t.ticket, spend_28d), 2),
        "spend_28d": spend_28d,
        "spend_total": spend_total,
        "purchases_total": purchases_total.astype(int),
        "days_since_last_purchase": np.where(
            t.payer, np.minimum(np.floor(last_purchase), 365), 365
        ).astype(int),
        "friends": t.friends + rng.poisson(0.2 * window + 0.1, size=n),
        "country_tier": t.tier,
        "platform": np.where(t.ios, PLATFORMS[1], PLATFORMS[0]),
    }


class _HasFeatures(Protocol):
    @property
    def features(self) -> Sequence[float]: ...


@dataclass(frozen=True)
class ImpressionLog:
    """Offers shown to players in one window, and whether each was bought."""

    X: np.ndarray  # float32 (n, row_width): encoded player features, then offer features
    y: np.ndarray  # int8 purchases
    p_true: np.ndarray  # float64 ground-truth purchase probabilities
    player_index: np.ndarray  # index into the window's player pool
    offer_index: np.ndarray  # index into the offers passed in

    def __len__(self) -> int:
        return len(self.y)

    def take(self, rows: np.ndarray | slice) -> ImpressionLog:
        return ImpressionLog(
            self.X[rows],
            self.y[rows],
            self.p_true[rows],
            self.player_index[rows],
            self.offer_index[rows],
        )


def impression_log(
    game: str,
    n_rows: int,
    *,
    window: int,
    seed: int,
    offers: Sequence[_HasFeatures],
    pool_size: int = DEFAULT_POOL_SIZE,
    population_seed: int = POPULATION_SEED,
) -> ImpressionLog:
    """`n_rows` impressions: players drawn from the window's pool, offers drawn uniformly."""
    pool = encoded_pool(game, pool_size, population_seed, window)
    offer_rows = np.array([list(offer.features) for offer in offers], dtype=np.float32)
    rng = np.random.default_rng((seed, game_number(game), window, 2))
    player_index = rng.integers(0, pool_size, size=n_rows)
    offer_index = rng.integers(0, len(offer_rows), size=n_rows)
    X = np.hstack([pool[player_index], offer_rows[offer_index]])
    width = feature_schema().player_width
    p_true = purchase_probability(X[:, :width], X[:, width:], window)
    y = (rng.random(n_rows) < p_true).astype(np.int8)
    return ImpressionLog(X, y, p_true, player_index, offer_index)


@lru_cache(maxsize=16)
def encoded_pool(game: str, size: int, seed: int, window: int) -> np.ndarray:
    """The encoded rows of the window's first `size` players (read-only, cached per process)."""
    rows = feature_schema().encode_records(generate_players(game, size, seed=seed, window=window))
    rows.setflags(write=False)
    return rows
