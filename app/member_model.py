"""One ensemble member: verify its artifact, load it, and score candidate matrices.

Artifacts never go through pickle. XGBoost members are stored in XGBoost's own UBJSON
format; scikit-learn members are stored with skops, whose loader only builds types it is told
to trust. Either way the sha256 from the manifest is checked *before* the file is parsed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from app.manifest import MemberEntry

# skops refuses any type not listed as trusted. After the checksum matched we accept the
# types a scikit-learn estimator is made of, and nothing from other packages.
_TRUSTED_MODULE_PREFIXES = ("sklearn.", "numpy.", "builtins.", "scipy.")


class ArtifactIntegrityError(RuntimeError):
    """The artifact on disk is missing or is not the one the manifest describes."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified_artifact(entry: MemberEntry, base_dir: Path) -> Path:
    """Path of the member's artifact, after its sha256 matched the manifest."""
    path = (base_dir / entry.artifact).resolve()
    if not path.is_relative_to(base_dir.resolve()):
        raise ArtifactIntegrityError(f"{entry.name}: artifact path escapes the version folder")
    if not path.is_file():
        raise ArtifactIntegrityError(f"{entry.name}: artifact {path} is missing")
    actual = sha256_of(path)
    if actual != entry.sha256:
        raise ArtifactIntegrityError(
            f"{entry.name}: sha256 mismatch for {path.name} (manifest {entry.sha256[:12]}…, "
            f"file {actual[:12]}…); refusing to load it"
        )
    return path


class MemberModel:
    """A loaded member. `score` maps an (n, width) float32 matrix to n purchase propensities."""

    def __init__(self, entry: MemberEntry, model: object, predict, width: int | None) -> None:
        self.entry = entry
        self.model = model  # the loaded booster or estimator, for inspection
        self._predict = predict
        self.width = width

    @property
    def name(self) -> str:
        return self.entry.name

    @classmethod
    def load(cls, entry: MemberEntry, base_dir: Path) -> MemberModel:
        path = verified_artifact(entry, base_dir)
        if entry.framework == "xgboost":
            return cls._load_xgboost(entry, path)
        return cls._load_sklearn(entry, path)

    @classmethod
    def _load_xgboost(cls, entry: MemberEntry, path: Path) -> MemberModel:
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(str(path))
        # Scoring on the caller's thread: replicas get a fraction of a core, and XGBoost's own
        # thread pool would oversubscribe it.
        booster.set_param({"nthread": 1})

        def predict(matrix: np.ndarray) -> np.ndarray:
            # inplace_predict scores the numpy buffer directly, without building a DMatrix.
            return booster.inplace_predict(matrix, validate_features=False)

        return cls(entry, booster, predict, booster.num_features())

    @classmethod
    def _load_sklearn(cls, entry: MemberEntry, path: Path) -> MemberModel:
        import skops.io
        from threadpoolctl import threadpool_limits

        # HistGradientBoosting predicts with an OpenMP team as wide as the machine. A member
        # gets a fraction of a core and the legacy server runs one process per core, so extra
        # threads only spin against each other: measured 747 ms instead of ~1 ms per 10-row
        # predict on a busy 2-core host. One thread for the whole process, set once.
        threadpool_limits(limits=1, user_api="openmp")

        untrusted = skops.io.get_untrusted_types(file=path)
        foreign = [t for t in untrusted if not t.startswith(_TRUSTED_MODULE_PREFIXES)]
        if foreign:
            raise ArtifactIntegrityError(f"{entry.name}: artifact holds foreign types {foreign}")
        estimator = skops.io.load(path, trusted=untrusted)
        # Same reason for joblib: a forest saved with n_jobs=2 would dispatch every 10-row
        # predict to a thread pool (measured 22 ms instead of ~3 ms for 60 trees).
        if hasattr(estimator, "get_params"):
            jobs = {k: None for k in estimator.get_params(deep=True) if k.endswith("n_jobs")}
            estimator.set_params(**jobs)

        def predict(matrix: np.ndarray) -> np.ndarray:
            return estimator.predict_proba(matrix)[:, 1]

        return cls(entry, estimator, predict, getattr(estimator, "n_features_in_", None))

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Propensities for every row of `matrix`, as float64."""
        if matrix.ndim != 2 or (self.width is not None and matrix.shape[1] != self.width):
            raise ValueError(
                f"{self.name}: expected a (n, {self.width}) matrix, got shape {matrix.shape}"
            )
        if matrix.shape[0] == 0:
            return np.empty(0, np.float64)
        return np.asarray(self._predict(matrix), dtype=np.float64)

    def score_many(self, matrices: list[np.ndarray]) -> list[np.ndarray]:
        """Score several matrices with one predict call and split the result back."""
        if len(matrices) == 1:
            return [self.score(matrices[0])]
        stacked = self.score(np.concatenate(matrices, axis=0))
        bounds = np.cumsum([m.shape[0] for m in matrices])[:-1]
        return np.split(stacked, bounds)


class MemberGroupModel:
    """Several members in one process, scored one after another on the same matrix."""

    def __init__(self, models: list[MemberModel]) -> None:
        if not models:
            raise ValueError("a member group needs at least one member")
        self.models = tuple(models)

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Shape (members, rows), in the group's member order."""
        out = np.empty((len(self.models), matrix.shape[0]), dtype=np.float64)
        for i, model in enumerate(self.models):
            out[i] = model.score(matrix)
        return out

    def score_many(self, matrices: list[np.ndarray]) -> list[np.ndarray]:
        """One predict per member for all matrices together, split back per matrix."""
        if len(matrices) == 1:
            return [self.score(matrices[0])]
        stacked = self.score(np.concatenate(matrices, axis=0))
        bounds = np.cumsum([m.shape[0] for m in matrices])[:-1]
        return np.split(stacked, bounds, axis=1)
