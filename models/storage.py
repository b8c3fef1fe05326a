"""Version folders on disk: the cache check, a per-version lock, and the atomic swap-in.

A version is trained into a staging folder next to its final place and renamed into it only
once its manifest is written, so an interrupted training never leaves half a version behind.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.contract.artifacts import (
    ArtifactIntegrityError,
    verified_artifact,
    verified_serving_artifact,
)
from app.contract.manifest import MANIFEST_FILENAME, load_manifest

_STAGING = "staging"
_RETIRED = "old"


def is_current(folder: Path, config_hash: str) -> bool:
    """True if `folder` holds a complete version trained from `config_hash`, artifacts intact."""
    if not (folder / MANIFEST_FILENAME).is_file():
        return False
    try:
        manifest = load_manifest(folder)
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return False
    if manifest.training_config_hash != config_hash:
        return False
    try:
        for entry in manifest.members:
            verified_artifact(entry, folder)
            if entry.serving is not None:
                verified_serving_artifact(entry, folder)
    except ArtifactIntegrityError:
        return False
    return True


@contextmanager
def version_lock(target: Path) -> Iterator[None]:
    """Serialize trainers of one version (e.g. several replicas starting at once)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def staging_folder(target: Path) -> Iterator[Path]:
    """An empty folder next to `target`; deleted on exit unless it was published."""
    _remove_leftovers(target)
    staging = _sibling(target, _STAGING)
    staging.mkdir()
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, target: Path) -> None:
    """Swap the fully written `staging` folder in as `target`."""
    retired = _sibling(target, _RETIRED)
    if target.exists():
        target.rename(retired)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)


def _sibling(target: Path, kind: str) -> Path:
    return target.parent / f".{target.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def _remove_leftovers(target: Path) -> None:
    # Only called under version_lock, so these belong to trainers that died mid-way.
    for kind in (_STAGING, _RETIRED):
        for path in target.parent.glob(f".{target.name}.{kind}-*"):
            shutil.rmtree(path, ignore_errors=True)
