"""What each ensemble member is trained on and with: versions, profiles and member recipes.

Members differ in the data they see (data window, bootstrap resample, player segment) and in
hyper-parameters, which is what makes their errors partly independent and their weighted mean
better than the average member.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from importlib import metadata
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.catalog import catalog_offers
from models.features import feature_schema
from models.population import POPULATION_SEED

# Bump when training code changes in a way the recipes don't capture: it invalidates caches.
# models-2: manifests record each member's predict_ms_10_rows; logistic-regression pipelines
# can expand features with splines and pairwise interactions.
# models-3: each member's compiled ONNX serving artifact, predict costs per runtime (call and
# row), and the fidelity check rows with their native scores.
CODE_VERSION = "models-3"

Estimator = Literal["xgboost", "hist_gradient_boosting", "extra_trees", "logistic_regression"]
Sampling = Literal["all", "bootstrap"]
Segment = Literal["all", "ios", "android", "spenders", "non-spenders"]
HyperParam = int | float | str


class VersionSpec(BaseModel):
    """A version is the same recipe trained on a later slice of weekly data windows."""

    model_config = ConfigDict(frozen=True)

    version: str
    train_windows: tuple[int, ...] = Field(min_length=1)
    holdout_window: int


class MemberRecipe(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,47}$")
    estimator: Estimator
    # Positions in the version's train_windows (0 = oldest); None means every train window.
    windows: tuple[int, ...] | None = None
    sampling: Sampling = "all"
    segment: Segment = "all"
    rows: int = Field(gt=0, description="training rows, drawn from the selected impressions")
    seed: int = 0
    params: dict[str, HyperParam] = Field(default_factory=dict)

    @property
    def framework(self) -> Literal["xgboost", "sklearn"]:
        return "xgboost" if self.estimator == "xgboost" else "sklearn"


class Profile(BaseModel):
    """A size class of ensemble: how much data is generated and which members are trained."""

    model_config = ConfigDict(frozen=True)

    name: str
    window_rows: int = Field(gt=0, description="impressions generated per training window")
    validation_rows: int = Field(gt=0, description="holdout-window rows that set the weights")
    test_rows: int = Field(gt=0, description="disjoint holdout-window rows that measure AUCs")
    members: tuple[MemberRecipe, ...] = Field(min_length=1)

    def member_names(self) -> list[str]:
        return [m.name for m in self.members]


VERSIONS: dict[str, VersionSpec] = {
    "2026-10": VersionSpec(version="2026-10", train_windows=(0, 1, 2, 3), holdout_window=4),
    "2026-11": VersionSpec(version="2026-11", train_windows=(2, 3, 4, 5), holdout_window=6),
    # Not served by serve_config.yaml: the version a release adds (docs/release.md).
    "2026-12": VersionSpec(version="2026-12", train_windows=(4, 5, 6, 7), holdout_window=8),
}


def _member(
    name: str,
    estimator: Estimator,
    rows: int,
    seed: int,
    *,
    windows: tuple[int, ...] | None = None,
    sampling: Sampling = "all",
    segment: Segment = "all",
    **params: HyperParam,
) -> MemberRecipe:
    if estimator == "xgboost":
        params = {"n_estimators": 200, "max_depth": 5, "learning_rate": 0.08} | params
    return MemberRecipe(
        name=name,
        estimator=estimator,
        windows=windows,
        sampling=sampling,
        segment=segment,
        rows=rows,
        seed=seed,
        params=params,
    )


# Windows are positions in the version's train_windows: "xgb-w3" learns from the latest week.
_STANDARD_MEMBERS = (
    _member("xgb-all", "xgboost", 80_000, 11, n_estimators=250, max_depth=6, learning_rate=0.06),
    _member("xgb-w0", "xgboost", 70_000, 12, windows=(0,)),
    _member("xgb-w2", "xgboost", 70_000, 13, windows=(2,), max_depth=4, n_estimators=250),
    _member("xgb-w3", "xgboost", 70_000, 14, windows=(3,), max_depth=6, learning_rate=0.06),
    _member(
        "xgb-boot1",
        "xgboost",
        80_000,
        15,
        sampling="bootstrap",
        subsample=0.8,
        colsample_bytree=0.8,
    ),
    _member(
        "xgb-boot2", "xgboost", 80_000, 16, sampling="bootstrap", max_depth=6, min_child_weight=5.0
    ),
    _member("xgb-ios", "xgboost", 60_000, 17, segment="ios"),
    _member("xgb-android", "xgboost", 60_000, 18, segment="android"),
    _member(
        "xgb-spenders", "xgboost", 50_000, 19, segment="spenders", max_depth=4, n_estimators=150
    ),
    _member(
        "hgb-w1",
        "hist_gradient_boosting",
        70_000,
        20,
        windows=(1,),
        max_iter=200,
        learning_rate=0.08,
        max_leaf_nodes=31,
        l2_regularization=1.0,
    ),
    _member(
        "et-boot3",
        "extra_trees",
        50_000,
        21,
        sampling="bootstrap",
        n_estimators=60,
        max_depth=12,
        min_samples_leaf=40,
        max_features=0.6,
    ),
    _member("logreg-all", "logistic_regression", 80_000, 22, C=1.0, max_iter=500),
)

_TINY_MEMBERS = (
    _member("xgb-all", "xgboost", 6_000, 11, n_estimators=40, max_depth=4, learning_rate=0.15),
    _member(
        "xgb-ios",
        "xgboost",
        4_000,
        17,
        segment="ios",
        n_estimators=30,
        max_depth=3,
        learning_rate=0.2,
    ),
    _member(
        "hgb-w1",
        "hist_gradient_boosting",
        5_000,
        20,
        windows=(1,),
        max_iter=40,
        learning_rate=0.15,
        max_leaf_nodes=15,
        l2_regularization=1.0,
    ),
    _member("logreg-all", "logistic_regression", 6_000, 22, C=1.0, max_iter=300),
)

# The standard members' names and data slices with production-sized models, for benchmarks whose
# members must cost milliseconds per request (10 candidate rows scored on one thread): 1,200-1,600
# trees of depth 10-14 per XGBoost member at a low learning rate, a 600-iteration
# HistGradientBoosting with 63 leaves per tree, twice the extra trees, and a logistic regression
# on a spline basis of every feature with all pairwise interactions (about 8,900 coefficients).
# Regularized (min_child_weight, lambda, C, small learning rates) so that the extra capacity does
# not turn into overfitting. Each manifest records the measured predict_ms_10_rows per member.
_HEAVY_XGB: dict[str, HyperParam] = {
    "n_estimators": 1200,
    "max_depth": 12,
    "learning_rate": 0.005,
    "min_child_weight": 6.0,
    "reg_lambda": 10.0,
    "subsample": 0.7,
    "colsample_bytree": 0.7,
    "max_bin": 128,
}


def _heavy_xgb(
    name: str,
    rows: int,
    seed: int,
    *,
    windows: tuple[int, ...] | None = None,
    sampling: Sampling = "all",
    segment: Segment = "all",
    **params: HyperParam,
) -> MemberRecipe:
    return _member(
        name,
        "xgboost",
        rows,
        seed,
        windows=windows,
        sampling=sampling,
        segment=segment,
        **(_HEAVY_XGB | params),
    )


_HEAVY_MEMBERS = (
    _heavy_xgb("xgb-all", 80_000, 11),
    _heavy_xgb("xgb-w0", 70_000, 12, windows=(0,), min_child_weight=4.0),
    _heavy_xgb(
        "xgb-w2", 70_000, 13, windows=(2,), max_depth=10, n_estimators=1600, learning_rate=0.004
    ),
    _heavy_xgb("xgb-w3", 70_000, 14, windows=(3,), max_depth=14),
    _heavy_xgb("xgb-boot1", 80_000, 15, sampling="bootstrap", subsample=0.8, colsample_bytree=0.8),
    _heavy_xgb("xgb-boot2", 80_000, 16, sampling="bootstrap", min_child_weight=4.0),
    _heavy_xgb("xgb-ios", 60_000, 17, segment="ios", min_child_weight=4.0),
    _heavy_xgb("xgb-android", 60_000, 18, segment="android", min_child_weight=4.0),
    # Spenders buy far more often, so their rows carry more hessian: a larger
    # min_child_weight keeps their leaves about as populated as the other members'.
    _heavy_xgb(
        "xgb-spenders", 50_000, 19, segment="spenders", min_child_weight=10.0, learning_rate=0.006
    ),
    _member(
        "hgb-w1",
        "hist_gradient_boosting",
        70_000,
        20,
        windows=(1,),
        max_iter=600,
        learning_rate=0.02,
        max_leaf_nodes=63,
        min_samples_leaf=50,
        l2_regularization=5.0,
    ),
    _member(
        "et-boot3",
        "extra_trees",
        60_000,
        21,
        sampling="bootstrap",
        n_estimators=120,
        max_depth=16,
        min_samples_leaf=30,
        max_features=0.6,
    ),
    # Fewer rows than the other members: the expanded design matrix is wide.
    _member(
        "logreg-all",
        "logistic_regression",
        40_000,
        22,
        spline_knots=5,
        interaction_degree=2,
        C=0.01,
        max_iter=500,
    ),
)

PROFILES: dict[str, Profile] = {
    "standard": Profile(
        name="standard",
        window_rows=80_000,
        validation_rows=40_000,
        test_rows=60_000,
        members=_STANDARD_MEMBERS,
    ),
    "tiny": Profile(
        name="tiny",
        window_rows=6_000,
        validation_rows=6_000,
        test_rows=10_000,
        members=_TINY_MEMBERS,
    ),
    # Smaller holdout samples than standard: scoring them with every heavy member on one thread
    # (as serving does) is a large share of the training time.
    "heavy": Profile(
        name="heavy",
        window_rows=80_000,
        validation_rows=20_000,
        test_rows=40_000,
        members=_HEAVY_MEMBERS,
    ),
}


def version_spec(version: str) -> VersionSpec:
    if version not in VERSIONS:
        raise KeyError(f"unknown version {version!r}; known versions: {', '.join(VERSIONS)}")
    return VERSIONS[version]


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise KeyError(f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}")
    return PROFILES[name]


def training_config_hash(game: str, version: str, profile_name: str) -> str:
    """Fingerprint of everything that determines a version's artifacts; the training cache key."""
    config = {
        "code_version": CODE_VERSION,
        "game": game,
        "catalog": [asdict(offer) for offer in catalog_offers(game)],
        "version": version_spec(version).model_dump(mode="json"),
        "profile": profile(profile_name).model_dump(mode="json"),
        "feature_schema": feature_schema().model_dump(mode="json"),
        "population_seed": POPULATION_SEED,
        # Artifacts written by one library version are not guaranteed to load in another.
        "libraries": {name: _installed_version(*dists) for name, dists in _LIBRARIES.items()},
    }
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


# Read from package metadata: importing the libraries themselves would cost seconds, and the
# hash is computed on every (usually cached) ensure_trained call.
_LIBRARIES = {
    "xgboost": ("xgboost-cpu", "xgboost"),
    "sklearn": ("scikit-learn",),
    "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime",),
}


def _installed_version(*distributions: str) -> str:
    for distribution in distributions:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "absent"
