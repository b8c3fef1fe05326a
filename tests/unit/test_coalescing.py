"""Cross-request coalescing: batching policy, per-request deadlines, cancellation."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.coalescing import Coalescer, CoalescingScorer
from app.fanout import Fanout, MemberRef

pytestmark = pytest.mark.unit


def run(coro):
    return asyncio.run(coro)


class RecordingRun:
    """A batch runner that answers each item with (item, batch number) after a delay."""

    def __init__(self, delay_s: float = 0.01, error: BaseException | None = None) -> None:
        self.batches: list[list[int]] = []
        self.delay_s = delay_s
        self.error = error
        self.running = 0
        self.max_running = 0

    async def __call__(self, batch) -> None:
        self.batches.append([p.item for p in batch])
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(self.delay_s)
            if self.error is not None:
                raise self.error
            for p in batch:
                if not p.future.done():
                    p.future.set_result((p.item, len(self.batches)))
        finally:
            self.running -= 1


def test_lone_call_goes_out_alone_and_at_once():
    async def main():
        runner = RecordingRun(delay_s=0)
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await coalescer.submit(7)
        return result, runner.batches, loop.time() - started

    result, batches, elapsed = run(main())
    assert result == (7, 1)
    assert batches == [[7]]
    assert elapsed < 0.05


def test_calls_arriving_while_busy_share_the_next_batch():
    async def main():
        runner = RecordingRun(delay_s=0.05)
        coalescer = Coalescer(runner, max_size=100, max_in_flight=1)
        first = asyncio.ensure_future(coalescer.submit(0))
        await asyncio.sleep(0.01)  # batch 1 is in flight with item 0
        rest = [asyncio.ensure_future(coalescer.submit(i)) for i in range(1, 6)]
        results = await asyncio.gather(first, *rest)
        return runner, results

    runner, results = run(main())
    assert runner.batches == [[0], [1, 2, 3, 4, 5]]
    assert runner.max_running == 1
    assert [r[1] for r in results] == [1, 2, 2, 2, 2, 2]


def test_batches_respect_max_size_and_max_in_flight():
    async def main():
        runner = RecordingRun(delay_s=0.02)
        coalescer = Coalescer(runner, max_size=4, max_in_flight=2)
        results = await asyncio.gather(*(coalescer.submit(i, size=2) for i in range(10)))
        return runner, results

    runner, results = run(main())
    assert [len(b) for b in runner.batches] == [2, 2, 2, 2, 2]
    assert runner.max_running == 2
    assert sorted(r[0] for r in results) == list(range(10))


def test_an_oversized_item_still_goes_out_on_its_own():
    async def main():
        runner = RecordingRun(delay_s=0)
        coalescer = Coalescer(runner, max_size=4, max_in_flight=1)
        await asyncio.gather(coalescer.submit(1, size=9), coalescer.submit(2, size=1))
        return runner.batches

    assert run(main()) == [[1], [2]]


def test_batch_failure_reaches_every_caller_and_frees_the_slot():
    async def main():
        runner = RecordingRun(delay_s=0, error=RuntimeError("boom"))
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        outcomes = await asyncio.gather(
            *(coalescer.submit(i) for i in range(3)), return_exceptions=True
        )
        runner.error = None
        after = await coalescer.submit(9)
        return outcomes, after, coalescer.in_flight

    outcomes, after, in_flight = run(main())
    assert all(isinstance(o, RuntimeError) for o in outcomes)
    assert after[0] == 9
    assert in_flight == 0


def test_cancelled_caller_is_dropped_from_the_queue():
    async def main():
        runner = RecordingRun(delay_s=0.03)
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        busy = asyncio.ensure_future(coalescer.submit(0))
        await asyncio.sleep(0.005)
        gone = asyncio.ensure_future(coalescer.submit(1))
        kept = asyncio.ensure_future(coalescer.submit(2))
        await asyncio.sleep(0.005)
        gone.cancel()
        await asyncio.gather(busy, kept)
        return runner.batches

    assert run(main()) == [[0], [2]]


class Group:
    """A member group scoring each row as row[0] * factor per member, after a delay."""

    def __init__(self, name, members, factors, delay_s=0.0):
        self.name = name
        self.members = tuple(MemberRef(m, 1.0) for m in members)
        self.factors = np.asarray(factors, dtype=np.float64)[:, None]
        self.delay_s = delay_s
        self.calls: list[int] = []
        self.cancelled = 0

    async def score(self, matrix):
        self.calls.append(matrix.shape[0])
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self.factors * matrix[:, 0][None, :]


def rows(*values):
    return np.array([[v, 0.0] for v in values])


def test_coalesced_requests_share_one_round_and_get_their_own_rows():
    fast = Group("g0", ["a", "b"], [1.0, 0.5], delay_s=0.02)

    async def main():
        scorer = CoalescingScorer(Fanout([fast]), max_rows=100, max_in_flight=1)
        first = asyncio.ensure_future(scorer.score(rows(0.1), 1.0))
        await asyncio.sleep(0.005)
        later = [scorer.score(rows(0.2, 0.3), 1.0), scorer.score(rows(0.4), 1.0)]
        return await asyncio.gather(first, *later)

    first, second, third = run(main())
    assert fast.calls == [1, 3]  # the two later requests went out as one round
    assert [a.name for a in second.answers] == ["a", "b"]
    np.testing.assert_allclose(second.answers[0].scores, [0.2, 0.3])
    np.testing.assert_allclose(second.answers[1].scores, [0.1, 0.15])
    np.testing.assert_allclose(third.answers[0].scores, [0.4])
    np.testing.assert_allclose(first.answers[1].scores, [0.05])


def test_each_request_keeps_its_own_deadline_in_a_shared_round():
    quick = Group("g0", ["a"], [1.0], delay_s=0.0)
    slow = Group("g1", ["b"], [1.0], delay_s=0.3)

    async def main():
        scorer = CoalescingScorer(Fanout([quick, slow]), max_rows=100, max_in_flight=1)
        tight, loose = await asyncio.gather(
            scorer.score(rows(0.1), 0.05), scorer.score(rows(0.2), 1.0)
        )
        return tight, loose

    tight, loose = run(main())
    assert quick.calls == [2] and slow.calls == [2]  # one round for both
    assert [a.name for a in tight.answers] == ["a"]
    assert tight.missing == {"b": "timeout"}
    assert tight.elapsed_ms < 250
    assert [a.name for a in loose.answers] == ["a", "b"]
    assert slow.cancelled == 0  # the loose request still wanted it


def test_stragglers_are_cancelled_once_every_reader_gave_up():
    slow = Group("g0", ["a"], [1.0], delay_s=5.0)

    async def main():
        scorer = CoalescingScorer(Fanout([slow]), max_rows=100, max_in_flight=1)
        results = await asyncio.gather(scorer.score(rows(0.1), 0.05), scorer.score(rows(0.2), 0.1))
        await asyncio.sleep(0)
        return results, scorer

    results, scorer = run(main())
    assert all(r.missing == {"a": "timeout"} for r in results)
    assert slow.cancelled == 1
    assert scorer._readers == {}  # nothing kept for abandoned rounds


def test_request_queued_behind_full_rounds_times_out_with_every_member_missing():
    slow = Group("g0", ["a", "b"], [1.0, 1.0], delay_s=0.5)

    async def main():
        scorer = CoalescingScorer(Fanout([slow]), max_rows=100, max_in_flight=1)
        busy = asyncio.ensure_future(scorer.score(rows(0.1), 1.0))
        await asyncio.sleep(0.01)
        queued = await scorer.score(rows(0.2), 0.05)
        await busy
        return queued

    queued = run(main())
    assert queued.answers == []
    assert queued.missing == {"a": "timeout", "b": "timeout"}
    assert slow.calls == [1]  # the timed-out request never went out


def test_cancelled_request_cancels_the_round_it_alone_was_waiting_for():
    slow = Group("g0", ["a"], [1.0], delay_s=5.0)

    async def main():
        scorer = CoalescingScorer(Fanout([slow]), max_rows=100, max_in_flight=1)
        task = asyncio.ensure_future(scorer.score(rows(0.1), 10.0))
        await asyncio.sleep(0.02)
        task.cancel()  # the HTTP client went away
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        return slow.cancelled, scorer._readers

    cancelled, readers = run(main())
    assert cancelled == 1
    assert readers == {}


def test_a_stuck_member_does_not_stall_later_requests_in_the_queue():
    quick = Group("g0", ["a"], [1.0], delay_s=0.0)
    stuck = Group("g1", ["b"], [1.0], delay_s=10.0)

    async def main():
        scorer = CoalescingScorer(
            Fanout([quick, stuck]), max_rows=100, max_in_flight=1, max_hold_s=0.05
        )
        first = asyncio.ensure_future(scorer.score(rows(0.1), 1.0))
        await asyncio.sleep(0.01)
        # Queued behind a round that will never finish: it must still go out within
        # max_hold_s and get the quick group's answer long before its 0.5 s budget.
        later = await scorer.score(rows(0.2), 0.5)
        first.cancel()
        return later

    later = run(main())
    assert [a.name for a in later.answers] == ["a"]
    assert later.missing == {"b": "timeout"}
    assert quick.calls == [1, 1]
