"""The impressions a version is trained and judged on, and each member's slice of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.catalog import catalog_offers
from models.features import PLATFORMS, column
from models.population import ImpressionLog, game_number, impression_log
from models.recipes import MemberRecipe, Profile, VersionSpec

# Impression streams: training windows and the holdout window draw from different seeds, so a
# window that is training data for one version and holdout for another is not the same sample.
TRAIN_STREAM = 1
HOLDOUT_STREAM = 2


@dataclass(frozen=True)
class Holdout:
    """Two disjoint samples of the holdout window: one sets weights, the other measures AUCs."""

    validation: ImpressionLog
    test: ImpressionLog


def training_logs(game: str, spec: VersionSpec, prof: Profile) -> dict[int, ImpressionLog]:
    """One impression log per training window, keyed by absolute window number."""
    offers = catalog_offers(game)
    return {
        window: impression_log(
            game, prof.window_rows, window=window, seed=TRAIN_STREAM, offers=offers
        )
        for window in spec.train_windows
    }


def holdout(game: str, spec: VersionSpec, prof: Profile) -> Holdout:
    log = impression_log(
        game,
        prof.validation_rows + prof.test_rows,
        window=spec.holdout_window,
        seed=HOLDOUT_STREAM,
        offers=catalog_offers(game),
    )
    split = prof.validation_rows
    return Holdout(validation=log.take(slice(0, split)), test=log.take(slice(split, None)))


@dataclass(frozen=True)
class MemberData:
    X: np.ndarray
    y: np.ndarray
    windows: tuple[int, ...]  # absolute window numbers the rows came from


def member_data(
    recipe: MemberRecipe, spec: VersionSpec, logs: dict[int, ImpressionLog], game: str
) -> MemberData:
    """The member's rows: its windows, then its segment, then its sampling."""
    positions = recipe.windows if recipe.windows is not None else range(len(spec.train_windows))
    windows = tuple(spec.train_windows[i] for i in positions)
    X = np.concatenate([logs[w].X for w in windows])
    y = np.concatenate([logs[w].y for w in windows])
    keep = _segment_mask(recipe, X)
    X, y = X[keep], y[keep]
    rng = np.random.default_rng((recipe.seed, game_number(game), *windows))
    if recipe.sampling == "bootstrap":
        rows = rng.integers(0, len(y), size=recipe.rows)
    else:
        rows = np.sort(rng.permutation(len(y))[: recipe.rows])
    return MemberData(X[rows], y[rows], windows)


def _segment_mask(recipe: MemberRecipe, X: np.ndarray) -> np.ndarray:
    platform = X[:, column("platform")]
    spend_total = X[:, column("spend_total")]
    masks = {
        "all": np.ones(len(X), dtype=bool),
        "ios": platform == PLATFORMS.index("ios"),
        "android": platform == PLATFORMS.index("android"),
        "spenders": spend_total > 0,
        "non-spenders": spend_total <= 0,
    }
    return masks[recipe.segment]
