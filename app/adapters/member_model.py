"""Members as serving runs them: verified artifacts scored on one thread, groups off the loop.

A group's members are scored by the runtime its application asks for (`runtime` in the app
args): `onnx` fuses every compiled member into one ONNX Runtime session
(app.adapters.onnx_members) and scores any member without a compiled form natively; `native`
calls each training library's own predict. Either way a group checks itself against the
native scores the manifest records before it serves (`check_fidelity`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from app.adapters.heap import release_freed_heap
from app.adapters.onnx_members import FusedMembers
from app.contract.artifacts import LoadedArtifact, load_artifact
from app.contract.manifest import Fidelity, MemberEntry, Runtime
from app.core.online.fanout import MemberRef


class FidelityError(RuntimeError):
    """A member's serving runtime does not reproduce the native scores the manifest records."""


class MemberScorer(Protocol):
    """Something that scores one or more members on the same matrix."""

    @property
    def entries(self) -> tuple[MemberEntry, ...]: ...

    def score(self, matrix: np.ndarray) -> np.ndarray: ...


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

    @property
    def entries(self) -> tuple[MemberEntry, ...]:
        return (self.entry,)

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
    """Several members in one process, scored on the same matrix, in the group's order.

    Its parts are native members (one predict each) and at most one fused session of
    compiled members (one call for all of them).

    Predicts run on the group's own single worker thread (`score_async` and
    `score_many_async`), never on the caller's event loop: a replica's loop must keep
    serving health checks, cancellations and new requests while a batch is being scored.
    XGBoost, scikit-learn's tree code and ONNX Runtime release the GIL while they predict,
    so the loop really does run meanwhile.
    """

    def __init__(self, parts: Sequence[MemberScorer], order: Sequence[str] | None = None) -> None:
        if not parts:
            raise ValueError("a member group needs at least one member")
        self.parts = tuple(parts)
        by_name = {e.name: e for part in self.parts for e in part.entries}
        names = list(order) if order is not None else list(by_name)
        if sorted(names) != sorted(by_name) or len(names) != len(by_name):
            raise ValueError(f"group order {names} does not name its members {sorted(by_name)}")
        self.entries = tuple(by_name[n] for n in names)
        position = {n: i for i, n in enumerate(names)}
        # Each part's rows of the (members, rows) output.
        self._rows = [np.array([position[e.name] for e in p.entries]) for p in self.parts]
        # One thread: predicts of one group never run concurrently (each is single-threaded
        # and the replica owns a fraction of a core). OpenMP's thread count is per calling
        # thread, so the cap is set again on this one when it starts.
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="predict", initializer=_one_openmp_thread
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    @property
    def runtimes(self) -> dict[str, str]:
        """Member -> the runtime that scores it here."""
        return {
            e.name: "onnx" if isinstance(p, FusedMembers) else "native"
            for p in self.parts
            for e in p.entries
        }

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Shape (members, rows), in the group's member order."""
        out = np.empty((len(self.entries), matrix.shape[0]), dtype=np.float64)
        for part, rows in zip(self.parts, self._rows, strict=True):
            out[rows] = part.score(matrix)
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
    (app.core.planning.member_placement). The same predicts as a member deployment's, on the group's
    own worker thread, without the hop. `delay_s`: injected before scoring (faults, set live
    by the supervisor's knobs)."""

    def __init__(self, name: str, group: MemberGroupModel, *, delay_s: float = 0.0) -> None:
        self.name = name
        self.members = tuple(MemberRef(e.name, e.weight) for e in group.entries)
        self._group = group
        self.delay_s = delay_s

    def score(self, matrix: np.ndarray) -> Awaitable[np.ndarray]:
        if self.delay_s > 0:
            return self._score_late(matrix)
        # The worker thread's own future, not a coroutine: the fan-out round waits on it
        # without a task of its own (two loop turns fewer per fan-out).
        return self._group.score_async(matrix)

    async def _score_late(self, matrix: np.ndarray) -> np.ndarray:
        await asyncio.sleep(self.delay_s)
        return await self._group.score_async(matrix)

    def close(self) -> None:
        self._group.close()


def load_group(
    entries: Sequence[MemberEntry],
    base_dir: Path,
    runtime: Runtime,
    fidelity: Fidelity | None,
) -> MemberGroupModel:
    """The members of `entries`, each verified (sha256) and loaded for `runtime`, then
    checked against the manifest's native scores. Raises before serving anything wrong."""
    compiled = [e for e in entries if e.runtime(runtime) == "onnx"]
    parts: list[MemberScorer] = []
    if compiled:
        if fidelity is None:
            raise FidelityError(
                f"{', '.join(e.name for e in compiled)}: the manifest has no check rows, so "
                "their compiled form cannot be checked against the native scores"
            )
        parts.append(FusedMembers.load(compiled, base_dir))
    parts.extend(MemberModel.load(e, base_dir) for e in entries if e.runtime(runtime) == "native")
    group = MemberGroupModel(parts, order=[e.name for e in entries])
    if fidelity is not None:
        check_fidelity(group, fidelity)
    # The protos, the fused graph and the parsers' buffers are garbage now (app.adapters.heap).
    release_freed_heap()
    return group


def check_fidelity(group: MemberGroupModel, fidelity: Fidelity) -> None:
    """Every member of `group` within `fidelity.tolerance` of its native score on every
    check row, or FidelityError naming each member that is not and by how much."""
    rows = np.asarray(fidelity.rows, dtype=np.float32)
    scores = group.score(rows)
    runtimes = group.runtimes
    failures = []
    for entry, got in zip(group.entries, scores, strict=True):
        if entry.name not in fidelity.scores:
            failures.append(f"{entry.name}: no native scores recorded")
            continue
        diff = np.abs(got - np.asarray(fidelity.scores[entry.name], dtype=np.float64))
        worst = int(np.argmax(diff))
        if not diff[worst] <= fidelity.tolerance:  # NaN fails too
            failures.append(
                f"{entry.name} ({runtimes[entry.name]}): differs from its native score by "
                f"{diff[worst]:.3g} on check row {worst} (tolerance {fidelity.tolerance:g})"
            )
    if failures:
        raise FidelityError("refusing to serve: " + "; ".join(failures))
