"""Build, fit and save one member's estimator. Artifacts are never pickled.

XGBoost members are saved as a Booster in XGBoost's UBJSON format; scikit-learn members with
skops, whose loader only rebuilds types it is told to trust (see app.adapters.member_model).
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
        return _logistic_pipeline(recipe, params)
    raise ValueError(f"{recipe.name}: unknown estimator {recipe.estimator!r}")


def _logistic_pipeline(recipe: MemberRecipe, params: dict):
    """arcsinh > StandardScaler [> splines [> interactions]] > LogisticRegression.

    `spline_knots` (recipe param) expands every feature into a cubic B-spline basis, which lets
    the linear model bend each feature's effect; `interaction_degree=2` then adds every pairwise
    product of those basis functions. Both are popped from the params; the rest go to
    LogisticRegression.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        FunctionTransformer,
        PolynomialFeatures,
        SplineTransformer,
        StandardScaler,
    )

    knots = int(params.pop("spline_knots", 0))
    degree = int(params.pop("interaction_degree", 1))
    if degree not in (1, 2) or (degree == 2 and not knots):
        raise ValueError(f"{recipe.name}: interaction_degree {degree} needs spline_knots")
    # Counts and amounts are heavy-tailed; arcsinh (log-like, yet defined for any value a
    # malformed record could carry) makes a linear model usable on them.
    steps = [FunctionTransformer(np.arcsinh), StandardScaler()]
    names = ["arcsinh", "StandardScaler"]
    if knots:
        # Constant extrapolation: a value beyond the training range scores like the range's
        # edge. Sparse output keeps the expanded training matrix a fraction of its dense size.
        steps.append(
            SplineTransformer(n_knots=knots, degree=3, extrapolation="constant", sparse_output=True)
        )
        names.append(f"SplineTransformer({knots} knots, cubic)")
    if degree == 2:
        steps.append(PolynomialFeatures(degree=2, interaction_only=True, include_bias=False))
        names.append("pairwise interactions")
    steps.append(LogisticRegression(random_state=recipe.seed, **params))
    names.append("LogisticRegression")
    return make_pipeline(*steps), "LogisticRegression", {"pipeline": " > ".join(names)}
