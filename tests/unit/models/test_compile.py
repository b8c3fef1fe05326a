"""Compiled members (models.compile): each kind scores as its native predict does, to 1e-6,
on rows far outside the training data, with missing values, and at any batch size."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, SplineTransformer, StandardScaler

from app.adapters.onnx_members import onnxruntime
from models.compile import NotCompilable, compile_member

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

WIDTH = 6


def data(n=2_000, seed=0):
    rng = np.random.default_rng(seed)
    X = (rng.lognormal(size=(n, WIDTH)) * rng.choice([1, 10, 100], size=WIDTH)).astype(np.float32)
    logit = np.log1p(X[:, 0]) - np.log1p(X[:, 1]) + 0.3 * np.sin(X[:, 2])
    y = (logit + rng.logistic(size=n) > 0).astype(int)
    return X, y


def probe_rows(X):
    """Training rows, rows scaled far outside their range, and every threshold itself: a
    value equal to a split's threshold is where float32 rounding would send it the wrong way."""
    rng = np.random.default_rng(1)
    wide = X[:200] * rng.uniform(0.01, 50, size=(200, WIDTH)).astype(np.float32)
    return np.concatenate([X[:300], wide, -wide[:50]]).astype(np.float32)


def run(model_bytes, X):
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    (p,) = session.run(["p"], {"X": X})
    assert p.dtype == np.float64 and p.shape == (X.shape[0],)
    return p


def threshold_rows(X, thresholds, features):
    """Rows whose one feature sits exactly on a split threshold (rounded to float32 as the
    input is), so the split's comparison decides."""
    rows = np.repeat(X[:1], len(thresholds), axis=0).copy()
    rows[np.arange(len(thresholds)), features] = np.asarray(thresholds, dtype=np.float32)
    return rows


def test_xgboost_matches_native_including_missing_values_and_thresholds():
    import xgboost

    X, y = data()
    booster = xgboost.XGBClassifier(n_estimators=60, max_depth=5, tree_method="hist").fit(X, y)
    booster = booster.get_booster()
    dump = booster.trees_to_dataframe()
    splits = dump[dump.Feature != "Leaf"]
    on_split = threshold_rows(
        X, splits.Split.to_numpy(), splits.Feature.str.lstrip("f").astype(int).to_numpy()
    )
    rows = np.concatenate([probe_rows(X), on_split])
    rows[::7, 3] = np.nan  # missing values follow each split's default direction
    native = booster.inplace_predict(rows, validate_features=False).astype(np.float64)
    compiled = run(compile_member(booster, WIDTH, "xgb"), rows)
    assert np.max(np.abs(compiled - native)) <= 1e-6


@pytest.mark.parametrize(
    "estimator",
    [
        HistGradientBoostingClassifier(max_iter=40, max_leaf_nodes=15, early_stopping=False),
        ExtraTreesClassifier(n_estimators=20, max_depth=10, random_state=0),
    ],
    ids=["hist_gradient_boosting", "extra_trees"],
)
def test_sklearn_trees_match_native_on_and_around_every_threshold(estimator):
    X, y = data()
    estimator.fit(X, y)
    if isinstance(estimator, ExtraTreesClassifier):
        trees = [e.tree_ for e in estimator.estimators_]
        thresholds = np.concatenate([t.threshold[t.children_left != -1] for t in trees])
        features = np.concatenate([t.feature[t.children_left != -1] for t in trees])
    else:
        nodes = np.concatenate([p.nodes for (p,) in estimator._predictors])
        split = nodes["is_leaf"] == 0
        thresholds, features = nodes["num_threshold"][split], nodes["feature_idx"][split]
    # float64 thresholds sit between float32 values: probe the float32 values on both sides.
    below = np.nextafter(thresholds.astype(np.float32), np.float32(-np.inf))
    above = np.nextafter(thresholds.astype(np.float32), np.float32(np.inf))
    rows = np.concatenate(
        [
            probe_rows(X),
            threshold_rows(X, thresholds, features),
            threshold_rows(X, below, features),
            threshold_rows(X, above, features),
        ]
    )
    native = estimator.predict_proba(rows.astype(np.float64))[:, 1]
    compiled = run(compile_member(estimator, WIDTH, "tree"), rows)
    assert np.max(np.abs(compiled - native)) <= 1e-6


def test_logistic_pipeline_matches_native_in_float64():
    X, y = data()
    pipeline = make_pipeline(
        FunctionTransformer(np.arcsinh), StandardScaler(), LogisticRegression(max_iter=500)
    ).fit(X, y)
    rows = np.concatenate([probe_rows(X), -probe_rows(X), np.zeros((3, WIDTH), np.float32)])
    native = pipeline.predict_proba(rows.astype(np.float64))[:, 1]
    compiled = run(compile_member(pipeline, WIDTH, "logreg"), rows)
    assert np.max(np.abs(compiled - native)) <= 1e-12


def test_what_has_no_compiled_form_is_refused_by_name():
    X, y = data(n=300)
    splines = make_pipeline(
        FunctionTransformer(np.arcsinh),
        StandardScaler(),
        SplineTransformer(n_knots=4),
        LogisticRegression(max_iter=200),
    ).fit(X, y)
    with pytest.raises(NotCompilable, match="splines-member: pipeline .*SplineTransformer"):
        compile_member(splines, WIDTH, "splines-member")
    log1p = make_pipeline(
        FunctionTransformer(np.log1p), StandardScaler(), LogisticRegression()
    ).fit(X, y)
    with pytest.raises(NotCompilable, match="FunctionTransformer"):
        compile_member(log1p, WIDTH, "log1p-member")
    with pytest.raises(NotCompilable, match="no compiled form for LogisticRegression"):
        compile_member(LogisticRegression().fit(X, y), WIDTH, "bare")
