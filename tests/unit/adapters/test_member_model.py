"""Loading members for serving: threading is decided by serving, not by the artifact."""

import asyncio
import threading

import numpy as np
import pytest
import skops.io
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
from threadpoolctl import threadpool_info

from app.adapters.member_model import InProcessGroupClient, MemberGroupModel, MemberModel
from app.contract.artifacts import LoadedArtifact, sha256_of
from app.contract.manifest import MemberEntry
from tests.support import member

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


def test_member_group_scores_each_member_on_one_stacked_matrix(tmp_path):
    from sklearn.linear_model import LogisticRegression

    first, X = saved_member(tmp_path, "forest", ExtraTreesClassifier(n_estimators=5))
    second, _ = saved_member(tmp_path, "linear", LogisticRegression())
    models = [MemberModel.load(e, tmp_path) for e in (first, second)]
    group = MemberGroupModel(models)
    parts = [X[:3], X[3:4], X[4:9]]
    split = group.score_many(parts)
    assert [p.shape for p in split] == [(2, 3), (2, 1), (2, 5)]
    for part, scores in zip(parts, split, strict=True):
        np.testing.assert_array_equal(scores[0], models[0].score(part))
        np.testing.assert_array_equal(scores[1], models[1].score(part))
    np.testing.assert_array_equal(group.score(X[:2]), np.stack([m.score(X[:2]) for m in models]))


class BlockingPredict:
    """A predict that holds its thread until released, like a long predict on a big batch."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.thread: str | None = None

    def __call__(self, matrix: np.ndarray) -> np.ndarray:
        self.thread = threading.current_thread().name
        self.started.set()
        assert self.release.wait(timeout=10), "never released"
        return np.full(matrix.shape[0], 0.5)


def test_group_predicts_off_the_event_loop_so_the_loop_keeps_serving():
    predict = BlockingPredict()
    group = MemberGroupModel([MemberModel(member("m0", 1.0), LoadedArtifact(None, predict, 2))])

    async def main():
        scoring = asyncio.ensure_future(group.score_many_async([np.zeros((3, 2), np.float32)]))
        # While the predict holds its thread, the loop still runs other work (in a replica:
        # health checks, cancellations, new requests). A predict on the loop would block here
        # and the release below would never come.
        await asyncio.get_running_loop().run_in_executor(None, predict.started.wait, 10)
        loop_thread = threading.current_thread().name
        predict.release.set()
        return await scoring, loop_thread

    try:
        [scores], loop_thread = asyncio.run(main())
    finally:
        group.close()
    assert scores.shape == (1, 3)
    assert predict.thread is not None and predict.thread != loop_thread


def test_group_predicts_run_with_one_openmp_thread():
    """OpenMP's thread count is per thread: the predict thread must be capped too."""
    saw: list[list[int]] = []

    def predict(matrix: np.ndarray) -> np.ndarray:
        saw.append([lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "openmp"])
        return np.full(matrix.shape[0], 0.5)

    HistGradientBoostingClassifier()  # scikit-learn's OpenMP runtime is loaded
    group = MemberGroupModel([MemberModel(member("m0", 1.0), LoadedArtifact(None, predict, 2))])
    try:
        asyncio.run(group.score_many_async([np.zeros((2, 2), np.float32)]))
    finally:
        group.close()
    assert saw and saw[0] and all(n == 1 for n in saw[0])


def test_inline_client_scores_on_the_group_thread_through_a_plain_future():
    predict = BlockingPredict()
    group = MemberGroupModel([MemberModel(member("m0", 1.0), LoadedArtifact(None, predict, 2))])
    client = InProcessGroupClient("inline", group)

    async def main():
        call = client.score(np.zeros((3, 2), np.float32))
        # A future of the loop, not a coroutine: the fan-out round needs no task to wait on it.
        assert isinstance(call, asyncio.Future)
        await asyncio.get_running_loop().run_in_executor(None, predict.started.wait, 10)
        loop_thread = threading.current_thread().name
        predict.release.set()
        return await call, loop_thread

    try:
        scores, loop_thread = asyncio.run(main())
    finally:
        client.close()
    np.testing.assert_array_equal(scores, np.full((1, 3), 0.5))
    assert predict.thread is not None and predict.thread != loop_thread


def test_inline_client_with_an_injected_delay_scores_after_it():
    quarter = LoadedArtifact(None, lambda m: np.full(m.shape[0], 0.25), 2)
    group = MemberGroupModel([MemberModel(member("m0", 1.0), quarter)])
    client = InProcessGroupClient("inline", group, delay_s=0.01)

    async def main():
        loop = asyncio.get_running_loop()
        started = loop.time()
        call = client.score(np.zeros((2, 2), np.float32))
        assert not isinstance(call, asyncio.Future)  # the delay runs in the round's own task
        return await call, loop.time() - started

    try:
        scores, took_s = asyncio.run(main())
    finally:
        client.close()
    np.testing.assert_array_equal(scores, np.full((1, 2), 0.25))
    assert took_s >= 0.01  # the injected delay was not skipped
