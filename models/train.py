"""Train (or reuse) one ensemble version: `ensure_trained(game, version, profile)`.

CLI: python -m models.train --game G --version V [--profile P] [--root DIR] [--force]
     python -m models.train --all [--profile P] [--root DIR] [--force]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path

import models
from app.manifest import Manifest, load_manifest
from models import recipes, storage
from models.catalog import GAMES, check_game

log = logging.getLogger(__name__)


def default_artifacts_root() -> Path:
    return Path(models.__file__).parent / "artifacts"


def version_dir(game: str, version: str, profile: str, root: Path | str | None = None) -> Path:
    return (Path(root) if root else default_artifacts_root()) / profile / game / version


def ensure_trained(
    game: str,
    version: str,
    profile: str = "standard",
    *,
    root: Path | str | None = None,
    force: bool = False,
) -> Path:
    """The folder holding the version's manifest.json, training it first unless a valid one exists.

    A cached version is reused when its manifest carries the current training-config hash and
    every artifact still has the sha256 the manifest records.
    """
    check_game(game)
    config_hash = recipes.training_config_hash(game, version, profile)
    target = version_dir(game, version, profile, root)
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


def mean_member_auc(manifest: Manifest) -> float:
    return statistics.fmean(m.auc for m in manifest.members)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m models.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--game", choices=GAMES)
    parser.add_argument("--version", choices=sorted(recipes.VERSIONS))
    parser.add_argument("--profile", choices=sorted(recipes.PROFILES), default="standard")
    parser.add_argument("--all", action="store_true", help="every game and version of the profile")
    parser.add_argument(
        "--root", type=Path, default=None, help="artifacts root (default: models/artifacts)"
    )
    parser.add_argument(
        "--force", action="store_true", help="retrain even if a valid version exists"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each member")
    args = parser.parse_args(argv)
    if not args.all and not (args.game and args.version):
        parser.error("give --game and --version, or --all")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )

    targets = (
        [(g, v) for g in GAMES for v in recipes.VERSIONS]
        if args.all
        else [(args.game, args.version)]
    )
    for game, version in targets:
        started = time.perf_counter()
        folder = ensure_trained(game, version, args.profile, root=args.root, force=args.force)
        elapsed = time.perf_counter() - started
        manifest = load_manifest(folder)
        print(
            f"{game} {version} {args.profile}: ensemble AUC {manifest.ensemble_auc:.4f}, "
            f"mean member AUC {mean_member_auc(manifest):.4f}, "
            f"oracle AUC {manifest.oracle_auc:.4f}, {len(manifest.members)} members, "
            f"{elapsed:.1f}s -> {folder}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
