"""The fan-out's straggler grace: once the quorum answered, the rest get a bounded wait."""

import asyncio

import numpy as np
import pytest

from app.core.online.coalescing import CoalescingScorer
from app.core.online.fanout import Fanout
from tests.support import FakeMember

pytestmark = pytest.mark.unit

MATRIX = np.zeros((3, 4))


class Stuck(FakeMember):
    """A group that never answers until cancelled (a replica on a lost node)."""

    def __init__(self, name, weight):
        super().__init__(name, weight, lambda m: np.full(m.shape[0], 0.5), delay_s=3600)


def groups():
    fast = FakeMember("fast", 0.6, lambda m: np.full(m.shape[0], 0.2))
    return fast, Stuck("stuck", 0.4)


def test_a_stuck_group_costs_the_grace_not_the_budget_once_the_quorum_answered():
    fast, stuck = groups()

    async def run():
        fanout = Fanout([fast, stuck], quorum=0.5, straggler_grace_s=0.05)
        return await asyncio.wait_for(fanout.score(MATRIX, budget_s=3600), timeout=60)

    result = asyncio.run(run())
    assert [a.name for a in result.answers] == ["fast"]
    assert result.missing == {"stuck": "timeout"}
    assert stuck.cancelled  # the stuck call was cancelled once nobody waited for it


def test_without_the_quorum_the_stuck_group_is_waited_for_until_the_budget():
    fast, stuck = groups()

    async def run():
        # fast alone holds 0.6 of the weight, below a 0.7 quorum: no early cut-off, so the
        # score waits for the whole (here short) budget, and the outer timeout is not hit.
        fanout = Fanout([fast, stuck], quorum=0.7, straggler_grace_s=0.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await asyncio.wait_for(fanout.score(MATRIX, budget_s=0.3), timeout=60)
        return result, loop.time() - started

    result, waited = asyncio.run(run())
    assert result.missing == {"stuck": "timeout"}
    assert waited >= 0.3


def test_no_grace_keeps_waiting_for_a_slow_group_that_answers_within_the_budget():
    fast = FakeMember("fast", 0.6, lambda m: np.full(m.shape[0], 0.2))
    slow = FakeMember("slow", 0.4, lambda m: np.full(m.shape[0], 0.4), delay_s=0.2)

    async def run(grace):
        return await Fanout([fast, slow], quorum=0.5, straggler_grace_s=grace).score(MATRIX, 5.0)

    assert {a.name for a in asyncio.run(run(None)).answers} == {"fast", "slow"}
    assert {a.name for a in asyncio.run(run(5.0)).answers} == {"fast", "slow"}


def test_coalesced_logins_share_the_rounds_cut_off():
    fast, stuck = groups()

    async def run():
        scorer = CoalescingScorer(
            Fanout([fast, stuck], quorum=0.5, straggler_grace_s=0.05),
            max_rows=100,
            max_in_flight=1,
            max_hold_s=0.01,
        )
        results = await asyncio.wait_for(
            asyncio.gather(*(scorer.score(MATRIX, 3600) for _ in range(3))), timeout=60
        )
        scorer.close()
        return results

    for result in asyncio.run(run()):
        assert [a.name for a in result.answers] == ["fast"]
        assert result.missing == {"stuck": "timeout"}


def test_an_unusable_reply_does_not_start_the_grace():
    """A fast group whose reply is dropped (wrong shape) must not count towards the quorum:
    the grace would otherwise cut off a slower group the quorum still needs."""
    broken = FakeMember("broken", 0.3, lambda m: np.full((2, m.shape[0] + 1), 0.1))
    fine = FakeMember("fine", 0.3, lambda m: np.full(m.shape[0], 0.2))
    slower = FakeMember("slower", 0.4, lambda m: np.full(m.shape[0], 0.4), delay_s=0.3)

    async def run():
        fanout = Fanout([broken, fine, slower], quorum=0.5, straggler_grace_s=0.01)
        return await asyncio.wait_for(fanout.score(MATRIX, budget_s=30), timeout=60)

    result = asyncio.run(run())
    assert {a.name for a in result.answers} == {"fine", "slower"}
    assert result.missing == {"broken": "bad_output"}


def test_live_weights_reweight_answers_and_weight_a_member_out():
    heavy = FakeMember("heavy", 3.0, lambda m: np.full(m.shape[0], 0.9))
    light = FakeMember("light", 1.0, lambda m: np.full(m.shape[0], 0.1))
    fanout = Fanout([heavy, light], quorum=0.5)
    fanout.configure(quorum=0.5, straggler_grace_s=None, weights={"heavy": 0.0, "light": 2.0})
    result = asyncio.run(fanout.score(MATRIX, 1.0))
    assert [(a.name, a.weight) for a in result.answers] == [("light", 2.0)]
    assert result.missing == {"heavy": "weighted_out"}
    fanout.configure(quorum=0.5, straggler_grace_s=None)  # back to the trained weights
    result = asyncio.run(fanout.score(MATRIX, 1.0))
    assert [(a.name, a.weight) for a in result.answers] == [("heavy", 3.0), ("light", 1.0)]
