"""Loading members for serving: threading is decided by serving, not by the artifact."""

import numpy as np
import pytest
import skops.io
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
from threadpoolctl import threadpool_info

from app.manifest import MemberEntry
from app.member_model import MemberModel, sha256_of

pytestmark = pytest.mark.unit


def saved_member(tmp_path, name, estimator):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=300) > 0).astype(int)
    estimator.fit(X, y)
    path = tmp_path / f"{name}.skops"
    skops.io.dump(estimator, path)
    entry = MemberEntry(
        name=name,
        framework="sklearn",
        estimator=type(estimator).__name__,
        artifact=path.name,
        sha256=sha256_of(path),
        weight=1.0,
        auc=0.7,
    )
    return entry, X


def test_forest_saved_with_parallel_jobs_scores_on_the_callers_thread(tmp_path):
    entry, X = saved_member(tmp_path, "et", ExtraTreesClassifier(n_estimators=5, n_jobs=2))
    member = MemberModel.load(entry, tmp_path)
    assert member.model.n_jobs is None
    scores = member.score(X[:10])
    assert scores.shape == (10,) and np.all((scores >= 0) & (scores <= 1))


def test_loading_a_sklearn_member_limits_openmp_to_one_thread(tmp_path):
    entry, X = saved_member(tmp_path, "hgb", HistGradientBoostingClassifier(max_iter=5))
    MemberModel.load(entry, tmp_path).score(X[:10])
    openmp = [lib for lib in threadpool_info() if lib["user_api"] == "openmp"]
    assert openmp, "scikit-learn's OpenMP runtime should be loaded"
    assert all(lib["num_threads"] == 1 for lib in openmp)
