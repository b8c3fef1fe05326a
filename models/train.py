"""Train (or reuse) one ensemble version: `ensure_trained(game, version, profile, root=...)`.

The artifacts root is always given by the caller (the `offers train` command and the other
tools pass OFFERS_ARTIFACTS_ROOT from the service settings); training reads no configuration
of its own.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
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


def ensure_trained_all(targets: Sequence[tuple[str, str, str, Path]]) -> list[Path]:
    """ensure_trained for each (game, version, profile, root), the ones to train in parallel.

    Training a version keeps one core busy (a standard version here: 23.6 s of CPU in
    24.6 s), so the versions that need it train in processes of their own, one per core:
    on 2 cores `make run` trains its two versions in the time of one. Spawned, not forked: a
    caller that already loaded XGBoost or scikit-learn holds OpenMP state a fork would copy.
    """
    for target in targets:
        check_game(target[0])
    stale = [
        t
        for t in targets
        if not storage.is_current(
            version_dir(Path(t[3]), t[2], t[0], t[1]), recipes.training_config_hash(*t[:3])
        )
    ]
    if len(stale) > 1:
        workers = min(len(stale), os.cpu_count() or 1)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            runs = [pool.submit(ensure_trained, g, v, p, root=r) for g, v, p, r in stale]
            for run in runs:
                run.result()
    return [
        ensure_trained(game, version, profile, root=root)
        for game, version, profile, root in targets
    ]


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
