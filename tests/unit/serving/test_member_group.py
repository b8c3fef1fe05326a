"""A member group scores any round it is sent, whatever its live batch size."""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np
import pytest

from app.serving.member_group import MemberGroupDeployment

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class ServeBatch:
    """What `@serve.batch` does with one call, as Ray 2.60's batching.py: a call with more
    rows than the batch size fails outright; its live setters."""

    def __init__(self) -> None:
        self.max_batch_size = 1024
        self.calls: list[int] = []

    def set_max_batch_size(self, size: int) -> None:
        self.max_batch_size = size

    def set_batch_wait_timeout_s(self, timeout_s: float) -> None:
        pass

    async def __call__(self, matrix: np.ndarray) -> np.ndarray:
        if matrix.shape[0] > self.max_batch_size:
            raise RuntimeError("Size of item is greater than max_batch_size")
        self.calls.append(matrix.shape[0])
        return np.vstack([matrix[:, 0], 2 * matrix[:, 0]])  # two members


def replica() -> tuple[MemberGroupDeployment, ServeBatch]:
    cls = MemberGroupDeployment.func_or_class
    group = cls.__new__(cls)  # the state __init__ leaves behind, without Ray
    group._names, group._delay_s, group._fault_counts = ["a", "b"], 0.0, Counter()
    group._max_batch_rows = 1024
    group._score_batch = batch = ServeBatch()
    return group, batch


def test_a_round_larger_than_a_lowered_batch_is_scored_in_parts():
    group, batch = replica()
    rows = np.arange(10, dtype=np.float32).reshape(10, 1)

    async def scenario() -> np.ndarray:
        # A live change lowers the batch below the rounds the supervisors send.
        await group.reconfigure({"batching": {"max_batch_rows": 4}})
        return await group.score(rows)

    scores = asyncio.run(scenario())
    assert batch.max_batch_size == 4 and sorted(batch.calls) == [2, 4, 4]
    np.testing.assert_array_equal(scores, np.vstack([rows[:, 0], 2 * rows[:, 0]]))


def test_a_round_within_the_batch_is_one_call():
    group, batch = replica()
    asyncio.run(group.score(np.ones((8, 1), np.float32)))
    assert batch.calls == [8]
