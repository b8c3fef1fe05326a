"""Member artifacts on disk: where a version lives, its checksums, and how an artifact is read.

Training writes these files and serving reads them, so both sides go through this module.
Artifacts never go through pickle. XGBoost members are stored in XGBoost's own UBJSON
format; scikit-learn members are stored with skops, whose loader only builds types it is told
to trust. Either way the sha256 from the manifest is checked *before* the file is parsed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.contract.manifest import MemberEntry

# skops refuses any type not listed as trusted. After the checksum matched we accept the
# types a scikit-learn estimator is made of, and nothing from other packages.
_TRUSTED_MODULE_PREFIXES = ("sklearn.", "numpy.", "builtins.", "scipy.")

Predict = Callable[[np.ndarray], np.ndarray]


class ArtifactIntegrityError(RuntimeError):
    """The artifact on disk is missing or is not the one the manifest describes."""


def version_dir(root: Path, profile: str, game: str, version: str) -> Path:
    """The folder holding one trained version's manifest and artifacts."""
    return root / profile / game / version


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified_artifact(entry: MemberEntry, base_dir: Path) -> Path:
    """Path of the member's artifact, after its sha256 matched the manifest."""
    return _verified(entry.name, entry.artifact, entry.sha256, base_dir)


def verified_serving_artifact(entry: MemberEntry, base_dir: Path) -> Path:
    """Path of the member's compiled artifact, after its sha256 matched the manifest."""
    if entry.serving is None:
        raise ArtifactIntegrityError(f"{entry.name}: the manifest records no compiled artifact")
    return _verified(entry.name, entry.serving.artifact, entry.serving.sha256, base_dir)


def _verified(member: str, artifact: str, sha256: str, base_dir: Path) -> Path:
    path = (base_dir / artifact).resolve()
    if not path.is_relative_to(base_dir.resolve()):
        raise ArtifactIntegrityError(f"{member}: artifact path escapes the version folder")
    verify_file(path, sha256, member)
    return path


def verify_file(path: Path, sha256: str, label: str) -> None:
    """Raise unless `path` is a file whose sha256 is `sha256`; the error names `label`, the
    file and both hashes (the loaders and the model store's copies alike)."""
    if not path.is_file():
        raise ArtifactIntegrityError(f"{label}: artifact {path} is missing")
    actual = sha256_of(path)
    if actual != sha256:
        raise ArtifactIntegrityError(
            f"{label}: sha256 mismatch for {path.name} (manifest {sha256}, file {actual}); "
            "refusing to load it"
        )


@dataclass(frozen=True)
class LoadedArtifact:
    """A verified, parsed member: `predict` maps an (n, width) float32 matrix to n P(buy)."""

    model: object  # the booster or estimator, for inspection
    predict: Predict
    width: int | None  # features the model expects, when the format records it


def load_artifact(entry: MemberEntry, base_dir: Path) -> LoadedArtifact:
    """Verify the member's checksum, then parse its artifact into a single-threaded predictor."""
    path = verified_artifact(entry, base_dir)
    if entry.framework == "xgboost":
        return _load_xgboost(path)
    return _load_sklearn(entry, path)


def _load_xgboost(path: Path) -> LoadedArtifact:
    import xgboost

    booster = xgboost.Booster()
    booster.load_model(str(path))
    # Scoring on the caller's thread: a serving replica gets a fraction of a core, and
    # XGBoost's own thread pool would oversubscribe it.
    booster.set_param({"nthread": 1})

    def predict(matrix: np.ndarray) -> np.ndarray:
        # inplace_predict scores the numpy buffer directly, without building a DMatrix.
        return np.asarray(booster.inplace_predict(matrix, validate_features=False))

    return LoadedArtifact(booster, predict, int(booster.num_features()))


def _load_sklearn(entry: MemberEntry, path: Path) -> LoadedArtifact:
    import skops.io

    untrusted = skops.io.get_untrusted_types(file=path)
    foreign = [t for t in untrusted if not t.startswith(_TRUSTED_MODULE_PREFIXES)]
    if foreign:
        raise ArtifactIntegrityError(f"{entry.name}: artifact holds foreign types {foreign}")
    estimator = skops.io.load(path, trusted=untrusted)
    # A forest saved with n_jobs=2 would dispatch every 10-row predict to a thread pool
    # (measured 22 ms instead of ~3 ms for 60 trees): score on the caller's thread.
    if hasattr(estimator, "get_params"):
        jobs = {k: None for k in estimator.get_params(deep=True) if k.endswith("n_jobs")}
        estimator.set_params(**jobs)

    def predict(matrix: np.ndarray) -> np.ndarray:
        # float64 in: a linear model computes in its input's dtype, and float32 BLAS sums
        # differ in the last bits with the batch's shape (measured up to 7e-8 for
        # logistic regression), so a player's score would depend on which logins it was
        # coalesced with, and batch scoring would not reproduce the online answer. Trees
        # compare thresholds, and float32 -> float64 is exact, so their scores are unchanged.
        return np.asarray(estimator.predict_proba(matrix.astype(np.float64))[:, 1])

    width = getattr(estimator, "n_features_in_", None)
    return LoadedArtifact(estimator, predict, int(width) if width is not None else None)
