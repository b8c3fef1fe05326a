"""Build, fit and save one member's estimator. Artifacts are never pickled.

XGBoost members are saved as a Booster in XGBoost's UBJSON format; scikit-learn members with
skops, whose loader only rebuilds types it is told to trust (see app.member_model).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.recipes import MemberRecipe

TRAIN_THREADS = 2  # the training machine's cores; serving scores on one thread per replica


@dataclass(frozen=True)
class SavedMember:
    artifact: str  # file name inside the version folder
    estimator: str  # class name recorded in the manifest
    summary: dict[str, str | int | float]  # how it was built, for MemberEntry.training


def fit_and_save(recipe: MemberRecipe, X: np.ndarray, y: np.ndarray, folder: Path) -> SavedMember:
    if recipe.estimator == "xgboost":
        return _xgboost(recipe, X, y, folder)
    return _sklearn(recipe, X, y, folder)


def _xgboost(recipe: MemberRecipe, X: np.ndarray, y: np.ndarray, folder: Path) -> SavedMember:
    from xgboost import XGBClassifier

    model = XGBClassifier(
        objective="binary:logistic",
        tree_method="hist",
        n_jobs=TRAIN_THREADS,
        random_state=recipe.seed,
        **recipe.params,
    )
    model.fit(X, y)
    artifact = f"{recipe.name}.ubj"
    model.get_booster().save_model(str(folder / artifact))
    return SavedMember(artifact, "XGBClassifier", dict(recipe.params))


def _sklearn(recipe: MemberRecipe, X: np.ndarray, y: np.ndarray, folder: Path) -> SavedMember:
    import skops.io

    estimator, name, summary = _build_sklearn(recipe)
    estimator.fit(X, y)
    if "n_jobs" in estimator.get_params():
        # Serving scores on the caller's thread; a saved thread pool would oversubscribe replicas.
        estimator.set_params(n_jobs=None)
    artifact = f"{recipe.name}.skops"
    skops.io.dump(estimator, folder / artifact)
    return SavedMember(artifact, name, summary | dict(recipe.params))


def _build_sklearn(recipe: MemberRecipe):
    from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    params = dict(recipe.params)
    if recipe.estimator == "hist_gradient_boosting":
        # Early stopping off: the holdout window, not a random split, judges the member.
        estimator = HistGradientBoostingClassifier(
            early_stopping=False, random_state=recipe.seed, **params
        )
        return estimator, "HistGradientBoostingClassifier", {}
    if recipe.estimator == "extra_trees":
        estimator = ExtraTreesClassifier(n_jobs=TRAIN_THREADS, random_state=recipe.seed, **params)
        return estimator, "ExtraTreesClassifier", {}
    if recipe.estimator == "logistic_regression":
        # Counts and amounts are heavy-tailed; arcsinh (log-like, yet defined for any value a
        # malformed record could carry) makes a linear model usable on them.
        estimator = make_pipeline(
            FunctionTransformer(np.arcsinh),
            StandardScaler(),
            LogisticRegression(random_state=recipe.seed, **params),
        )
        return (
            estimator,
            "LogisticRegression",
            {"pipeline": "arcsinh > StandardScaler > LogisticRegression"},
        )
    raise ValueError(f"{recipe.name}: unknown estimator {recipe.estimator!r}")
