"""Members as serving runs them: verified artifacts scored on one thread, groups off the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from app.contract.artifacts import LoadedArtifact, load_artifact
from app.contract.manifest import MemberEntry
from app.core.fanout import MemberRef


class MemberModel:
    """A loaded member. `score` maps an (n, width) float32 matrix to n purchase propensities."""

    def __init__(self, entry: MemberEntry, artifact: LoadedArtifact) -> None:
        self.entry = entry
        self.model = artifact.model  # the loaded booster or estimator, for inspection
        self._predict = artifact.predict
        self.width = artifact.width

    @property
    def name(self) -> str:
        return self.entry.name

    @classmethod
    def load(cls, entry: MemberEntry, base_dir: Path) -> MemberModel:
        artifact = load_artifact(entry, base_dir)
        if entry.framework == "sklearn":
            # HistGradientBoosting predicts with an OpenMP team as wide as the machine. A
            # member gets a fraction of a core and the legacy server runs one process per
            # core, so extra threads only spin against each other: measured 747 ms instead of
            # ~1 ms per 10-row predict on a busy 2-core host. One thread for the process; set
            # after loading, because threadpoolctl only limits runtimes already loaded.
            threadpool_limits(limits=1, user_api="openmp")
        return cls(entry, artifact)

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Propensities for every row of `matrix`, as float64."""
        if matrix.ndim != 2 or (self.width is not None and matrix.shape[1] != self.width):
            raise ValueError(
                f"{self.name}: expected a (n, {self.width}) matrix, got shape {matrix.shape}"
            )
        if matrix.shape[0] == 0:
            return np.empty(0, np.float64)
        return np.asarray(self._predict(matrix), dtype=np.float64)


def _one_openmp_thread() -> None:
    threadpool_limits(limits=1, user_api="openmp")


class MemberGroupModel:
    """Several members in one process, scored one after another on the same matrix.

    Predicts run on the group's own single worker thread (`score_async` and
    `score_many_async`), never on the caller's event loop: a replica's loop must keep
    serving health checks, cancellations and new requests while a batch is being scored.
    XGBoost and scikit-learn's tree code release the GIL while they predict, so the loop
    really does run meanwhile.
    """

    def __init__(self, models: Sequence[MemberModel]) -> None:
        if not models:
            raise ValueError("a member group needs at least one member")
        self.models = tuple(models)
        # One thread: predicts of one group never run concurrently (each is single-threaded
        # and the replica owns a fraction of a core). OpenMP's thread count is per calling
        # thread, so the cap is set again on this one when it starts.
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="predict", initializer=_one_openmp_thread
        )

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Shape (members, rows), in the group's member order."""
        out = np.empty((len(self.models), matrix.shape[0]), dtype=np.float64)
        for i, model in enumerate(self.models):
            out[i] = model.score(matrix)
        return out

    def score_many(self, matrices: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One predict per member for all matrices together, split back per matrix."""
        if len(matrices) == 1:
            return [self.score(matrices[0])]
        stacked = self.score(np.concatenate(matrices, axis=0))
        bounds = np.cumsum([m.shape[0] for m in matrices])[:-1]
        return np.split(stacked, bounds, axis=1)

    async def score_many_async(self, matrices: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`score_many` on the group's worker thread; the caller's event loop stays free."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.score_many, list(matrices))

    def score_async(self, matrix: np.ndarray) -> asyncio.Future[np.ndarray]:
        """`score` on the group's worker thread, as a future of the caller's event loop."""
        return asyncio.get_running_loop().run_in_executor(self._executor, self.score, matrix)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class InProcessGroupClient:
    """A member group scored in this process: the supervisor's inline members
    (app.core.member_placement). The same predicts as a member deployment's, on the group's
    own worker thread, without the hop. `delay_s`: injected before scoring (faults)."""

    def __init__(self, name: str, group: MemberGroupModel, *, delay_s: float = 0.0) -> None:
        self.name = name
        self.members = tuple(MemberRef(m.entry.name, m.entry.weight) for m in group.models)
        self._group = group
        self._delay_s = delay_s

    def score(self, matrix: np.ndarray) -> Awaitable[np.ndarray]:
        if self._delay_s > 0:
            return self._score_late(matrix)
        # The worker thread's own future, not a coroutine: the fan-out round waits on it
        # without a task of its own (two loop turns fewer per fan-out).
        return self._group.score_async(matrix)

    async def _score_late(self, matrix: np.ndarray) -> np.ndarray:
        await asyncio.sleep(self._delay_s)
        return await self._group.score_async(matrix)

    def close(self) -> None:
        self._group.close()
