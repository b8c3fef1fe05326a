"""Parallel fan-out of one candidate matrix to every member, bounded by a time budget."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from app.aggregation import MemberScores

logger = logging.getLogger(__name__)


class MemberClient(Protocol):
    """Anything that scores a candidate matrix for one member: a Serve handle or, in tests
    and the legacy baseline, an in-process model."""

    name: str
    weight: float

    async def score(self, matrix: np.ndarray) -> np.ndarray: ...


class EnsembleScorer(Protocol):
    """Scores one candidate matrix with the ensemble's members within a time budget."""

    async def score(self, matrix: np.ndarray, budget_s: float) -> FanoutResult: ...


@dataclass(frozen=True)
class FanoutResult:
    answers: list[MemberScores]
    # member name -> why it is missing from `answers` ("timeout" or the error type)
    missing: dict[str, str] = field(default_factory=dict)
    elapsed_ms: float = 0.0


class Fanout:
    """Sends one matrix to all members at once and keeps whatever answered within budget."""

    def __init__(self, members: Sequence[MemberClient]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = tuple(members)

    async def score(self, matrix: np.ndarray, budget_s: float) -> FanoutResult:
        started = time.perf_counter()
        tasks = {asyncio.ensure_future(m.score(matrix)): m for m in self.members}
        try:
            done, pending = await asyncio.wait(tasks, timeout=max(budget_s, 0.0))
        except asyncio.CancelledError:
            # The caller went away (e.g. client disconnect): stop the members' work too.
            for task in tasks:
                task.cancel()
            raise
        for task in pending:
            task.cancel()
        answers: list[MemberScores] = []
        missing = {tasks[t].name: "timeout" for t in pending}
        for task in done:
            member = tasks[task]
            if task.exception() is not None:
                exc = task.exception()
                logger.warning("member %s failed: %s: %s", member.name, type(exc).__name__, exc)
                missing[member.name] = type(exc).__name__
                continue
            scores = np.asarray(task.result(), dtype=np.float64)
            # A member answering with the wrong shape or non-probabilities is as good as
            # absent: aggregating it would fail the whole request or skew the offer.
            if scores.shape != (matrix.shape[0],) or not np.all((scores >= 0) & (scores <= 1)):
                logger.warning("member %s returned unusable scores %s", member.name, scores.shape)
                missing[member.name] = "bad_output"
                continue
            answers.append(MemberScores(member.name, member.weight, scores))
        # Keep manifest order so the aggregate sums in the same order as offline scoring.
        order = {m.name: i for i, m in enumerate(self.members)}
        answers.sort(key=lambda a: order[a.name])
        return FanoutResult(answers, missing, (time.perf_counter() - started) * 1000.0)
