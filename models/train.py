"""Train (or reuse) one ensemble version: `ensure_trained(game, version, profile, root=...)`.

The artifacts root is always given by the caller (the `offers train` command and the other
tools pass OFFERS_ARTIFACTS_ROOT from the service settings); training reads no configuration
of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.contract.artifacts import version_dir
from app.contract.manifest import Manifest
from models import recipes, storage
from models.catalog import check_game


def ensure_trained(
    game: str,
    version: str,
    profile: str = "standard",
    *,
    root: Path,
    force: bool = False,
) -> Path:
    """The folder holding the version's manifest.json, training it first unless a valid one exists.

    A cached version is reused when its manifest carries the current training-config hash and
    every artifact still has the sha256 the manifest records.
    """
    check_game(game)
    config_hash = recipes.training_config_hash(game, version, profile)
    target = version_dir(Path(root), profile, game, version)
    if not force and storage.is_current(target, config_hash):
        return target
    with storage.version_lock(target):
        # Another process may have finished training it while we waited for the lock.
        if not force and storage.is_current(target, config_hash):
            return target
        with storage.staging_folder(target) as staging:
            train_version(game, version, profile, staging, config_hash)
            storage.publish(staging, target)
    return target


def train_version(
    game: str, version: str, profile: str, folder: Path, config_hash: str
) -> Manifest:
    """Train every member of the profile into `folder` and write its manifest there."""
    # On shared vCPUs an OpenMP worker spinning at a barrier can stall its partner for
    # milliseconds each time (measured here: XGBoost and HistGradientBoosting fits 10-20x slower).
    # Only effective if XGBoost and scikit-learn are not loaded yet; an explicit setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Imported here so that a cache hit never pays for loading XGBoost and scikit-learn.
    from models.version_builder import build_version

    return build_version(game, version, profile, folder, config_hash)
