"""Cross-request coalescing: batching policy, per-request deadlines, cancellation.

Groups and batch runners here answer when the test releases them (asyncio events), not after
sleeps, so every assertion is about order and content, never about wall-clock speed.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.core.online.coalescing import Coalescer, CoalescingScorer
from app.core.online.fanout import Fanout, MemberRef

pytestmark = pytest.mark.unit


def run(coro):
    return asyncio.run(coro)


async def until(predicate, turns: int = 20) -> None:
    """Let the loop run until `predicate()`; a bounded number of turns, no timers."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached within the event loop turns allowed")


class GatedRun:
    """A batch runner that answers each item with (item, batch number) once released."""

    def __init__(self, error: BaseException | None = None, open_: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.error = error
        self.gate = asyncio.Event()
        if open_:
            self.gate.set()
        self.running = 0
        self.max_running = 0

    async def __call__(self, batch) -> None:
        self.batches.append([p.item for p in batch])
        number = len(self.batches)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self.gate.wait()
            if self.error is not None:
                raise self.error
            for p in batch:
                if not p.future.done():
                    p.future.set_result((p.item, number))
        finally:
            self.running -= 1


def test_lone_call_goes_out_alone_without_waiting_for_a_timer():
    async def main():
        runner = GatedRun(open_=True)
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        call = asyncio.ensure_future(coalescer.submit(7))
        # Out within a few loop turns: no timer has to fire for a lone call.
        await until(lambda: runner.batches)
        return await call, runner.batches

    result, batches = run(main())
    assert result == (7, 1)
    assert batches == [[7]]


def test_calls_arriving_while_busy_share_the_next_batch():
    async def main():
        runner = GatedRun()
        coalescer = Coalescer(runner, max_size=100, max_in_flight=1)
        first = asyncio.ensure_future(coalescer.submit(0))
        await until(lambda: runner.running == 1)  # batch 1 is in flight with item 0
        rest = [asyncio.ensure_future(coalescer.submit(i)) for i in range(1, 6)]
        runner.gate.set()
        results = await asyncio.gather(first, *rest)
        return runner, results

    runner, results = run(main())
    assert runner.batches == [[0], [1, 2, 3, 4, 5]]
    assert runner.max_running == 1
    assert [r[1] for r in results] == [1, 2, 2, 2, 2, 2]


def test_batches_respect_max_size_and_max_in_flight():
    async def main():
        runner = GatedRun()
        coalescer = Coalescer(runner, max_size=4, max_in_flight=2)
        calls = [asyncio.ensure_future(coalescer.submit(i, size=2)) for i in range(10)]
        await until(lambda: runner.running == 2)
        assert coalescer.in_flight == 2 and len(runner.batches) == 2  # the rest wait
        runner.gate.set()
        return runner, await asyncio.gather(*calls)

    runner, results = run(main())
    assert [len(b) for b in runner.batches] == [2, 2, 2, 2, 2]
    assert runner.max_running == 2
    assert sorted(r[0] for r in results) == list(range(10))


def test_an_oversized_item_still_goes_out_on_its_own():
    async def main():
        runner = GatedRun(open_=True)
        coalescer = Coalescer(runner, max_size=4, max_in_flight=1)
        await asyncio.gather(coalescer.submit(1, size=9), coalescer.submit(2, size=1))
        return runner.batches

    assert run(main()) == [[1], [2]]


def test_batch_failure_reaches_every_caller_and_frees_the_slot():
    async def main():
        runner = GatedRun(error=RuntimeError("boom"), open_=True)
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
        runner = GatedRun()
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        busy = asyncio.ensure_future(coalescer.submit(0))
        await until(lambda: runner.running == 1)
        gone = asyncio.ensure_future(coalescer.submit(1))
        kept = asyncio.ensure_future(coalescer.submit(2))
        await asyncio.sleep(0)
        gone.cancel()
        runner.gate.set()
        await asyncio.gather(busy, kept)
        return runner.batches

    assert run(main()) == [[0], [2]]


def test_a_cancelled_batch_cancels_its_callers_rather_than_failing_them():
    async def main():
        runner = GatedRun()
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        futures = [coalescer.enqueue(i) for i in range(3)]
        await until(lambda: runner.running == 1)
        coalescer.close()  # replica shutdown: the running batch is cancelled
        await until(lambda: coalescer.in_flight == 0)
        return futures

    futures = run(main())
    # Cancelled, not failed with a CancelledError stored as their exception.
    assert all(f.cancelled() for f in futures)


def test_a_batch_cancelled_before_it_started_gives_its_slot_back():
    async def main():
        runner = GatedRun(open_=True)
        coalescer = Coalescer(runner, max_size=10, max_in_flight=1)
        future = coalescer.enqueue(1)
        await asyncio.sleep(0)  # the flush ran: the batch task exists but has not started
        assert coalescer.in_flight == 1 and runner.batches == []
        coalescer.close()
        await until(lambda: coalescer.in_flight == 0)
        after = await coalescer.submit(2)  # the slot is usable again
        return future, after, runner.batches

    future, after, batches = run(main())
    assert future.cancelled()
    assert after == (2, 1)
    assert batches == [[2]]


class Group:
    """A member group scoring each row as row[0] * factor per member, once released."""

    def __init__(self, name, members, factors, *, released=True, scores=None):
        self.name = name
        self.members = tuple(MemberRef(m, 1.0) for m in members)
        self.factors = np.asarray(factors, dtype=np.float64)[:, None]
        self.gate = asyncio.Event()
        if released:
            self.gate.set()
        self.scores = scores  # a fixed reply instead of the computed one
        self.calls: list[int] = []
        self.cancelled = 0

    async def score(self, matrix):
        self.calls.append(matrix.shape[0])
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.scores is not None:
            return self.scores
        return self.factors * matrix[:, 0][None, :]


def rows(*values):
    return np.array([[v, 0.0] for v in values])


def scorer_for(*groups, max_in_flight=1, max_hold_s=0.1, alone=None):
    return CoalescingScorer(
        Fanout(list(groups)),
        max_rows=100,
        max_in_flight=max_in_flight,
        max_hold_s=max_hold_s,
        alone=alone,
    )


def test_coalesced_requests_share_one_round_and_get_their_own_rows():
    async def main():
        group = Group("g0", ["a", "b"], [1.0, 0.5], released=False)
        scorer = scorer_for(group)
        first = asyncio.ensure_future(scorer.score(rows(0.1), 5.0))
        await until(lambda: group.calls == [1])
        later = [
            asyncio.ensure_future(scorer.score(rows(0.2, 0.3), 5.0)),
            asyncio.ensure_future(scorer.score(rows(0.4), 5.0)),
        ]
        await asyncio.sleep(0)
        group.gate.set()
        return group, await asyncio.gather(first, *later)

    group, (first, second, third) = run(main())
    assert group.calls == [1, 3]  # the two later requests went out as one round
    assert [a.name for a in second.answers] == ["a", "b"]
    np.testing.assert_allclose(second.answers[0].scores, [0.2, 0.3])
    np.testing.assert_allclose(second.answers[1].scores, [0.1, 0.15])
    np.testing.assert_allclose(third.answers[0].scores, [0.4])
    np.testing.assert_allclose(first.answers[1].scores, [0.05])


def test_each_request_keeps_its_own_deadline_in_a_shared_round():
    async def main():
        quick = Group("g0", ["a"], [1.0])
        slow = Group("g1", ["b"], [1.0], released=False)
        scorer = scorer_for(quick, slow)
        tight = asyncio.ensure_future(scorer.score(rows(0.1), 0.05))
        loose = asyncio.ensure_future(scorer.score(rows(0.2), 10.0))
        tight_result = await tight  # returns while `slow` has still not answered
        assert not loose.done()
        slow.gate.set()
        return quick, slow, tight_result, await loose

    quick, slow, tight, loose = run(main())
    assert quick.calls == [2] and slow.calls == [2]  # one round for both
    assert [a.name for a in tight.answers] == ["a"]
    assert tight.missing == {"b": "timeout"}
    assert [a.name for a in loose.answers] == ["a", "b"]
    assert slow.cancelled == 0  # the loose request still wanted it


def test_stragglers_are_cancelled_once_every_reader_gave_up():
    async def main():
        slow = Group("g0", ["a"], [1.0], released=False)
        scorer = scorer_for(slow)
        results = await asyncio.gather(scorer.score(rows(0.1), 0.05), scorer.score(rows(0.2), 0.1))
        await until(lambda: slow.cancelled == 1)
        return results, scorer, slow

    results, scorer, slow = run(main())
    assert all(r.missing == {"a": "timeout"} for r in results)
    assert slow.calls == [2]
    assert scorer._readers == {}  # nothing kept for abandoned rounds


class Answering(Group):
    """A group that answers through a future of the loop, as the supervisor's inline members
    do: its call is made as the round starts, with no task of its own. `answer()` resolves
    the calls made so far."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = []

    def score(self, matrix):
        self.calls.append(matrix.shape[0])
        future = asyncio.get_running_loop().create_future()
        self.pending.append((future, self.factors * matrix[:, 0][None, :]))
        return future

    def answer(self):
        for future, scores in self.pending:
            future.set_result(scores)
        self.pending.clear()


def test_a_lone_login_reaches_the_members_in_its_own_loop_turn():
    async def main():
        group = Answering("g0", ["a"], [1.0])
        scorer = scorer_for(group, max_hold_s=10.0, alone=lambda: True)
        lone = asyncio.ensure_future(scorer.score(rows(0.5), 5.0))
        await asyncio.sleep(0)  # one turn: the lone login's first step
        assert group.calls == [1]  # no flush turn or batch task before its round started
        # Its round holds the one slot: logins arriving now batch up behind it.
        behind = [asyncio.ensure_future(scorer.score(rows(0.1), 5.0)) for _ in range(2)]
        for _ in range(5):
            await asyncio.sleep(0)
        assert group.calls == [1]
        group.answer()
        await until(lambda: group.calls == [1, 2])
        group.answer()
        return await lone, await asyncio.gather(*behind)

    lone, behind = run(main())
    np.testing.assert_allclose(lone.answers[0].scores, [0.5])
    for result in behind:
        np.testing.assert_allclose(result.answers[0].scores, [0.1])


def test_logins_in_progress_together_share_a_round_even_when_the_scorer_is_idle():
    """Logins whose feature reads resolve in one turn reach the scorer in that turn: while
    another login is in progress, a login waits that turn to share its round."""

    async def main():
        group = Answering("g0", ["a"], [1.0])
        in_progress = 2
        scorer = scorer_for(group, alone=lambda: in_progress <= 1)
        pair = [asyncio.ensure_future(scorer.score(rows(0.1 * i), 5.0)) for i in (1, 2)]
        await asyncio.sleep(0)
        assert group.calls == []  # neither started a round of its own
        await until(lambda: group.calls == [2])
        group.answer()
        return await asyncio.gather(*pair)

    first, second = run(main())
    np.testing.assert_allclose(first.answers[0].scores, [0.1])
    np.testing.assert_allclose(second.answers[0].scores, [0.2])


def test_a_group_that_fails_before_it_answers_is_that_groups_failure():
    class Refusing(Group):
        def score(self, matrix):
            raise RuntimeError("cannot schedule new futures after shutdown")

    async def main():
        return await scorer_for(Refusing("g0", ["a"], [1.0]), Group("g1", ["b"], [1.0])).score(
            rows(0.2), 5.0
        )

    result = run(main())
    assert [a.name for a in result.answers] == ["b"]
    assert result.missing == {"a": "RuntimeError"}


# The first login of a test either batched (a turn, the batch's task) or the only one in
# progress (its round in its own task): slots and rounds must be given back either way.
BOTH_PATHS = pytest.mark.parametrize(
    "alone", [None, lambda: True], ids=["batched", "lone"]
)


def all_given_back(scorer):
    return scorer._coalescer.in_flight == 0 and scorer._readers == {}


def test_request_queued_behind_full_rounds_times_out_with_every_member_missing():
    async def main():
        slow = Group("g0", ["a", "b"], [1.0, 1.0], released=False)
        # A hold longer than the queued request's budget: it cannot get a slot in time.
        scorer = scorer_for(slow, max_hold_s=10.0)
        busy = asyncio.ensure_future(scorer.score(rows(0.1), 10.0))
        await until(lambda: slow.calls == [1])
        queued = await scorer.score(rows(0.2), 0.05)
        slow.gate.set()
        await busy
        return slow, queued

    slow, queued = run(main())
    assert queued.answers == []
    assert queued.missing == {"a": "timeout", "b": "timeout"}
    assert slow.calls == [1]  # the timed-out request never went out


@BOTH_PATHS
def test_cancelled_request_cancels_the_round_it_alone_was_waiting_for(alone):
    async def main():
        slow = Group("g0", ["a"], [1.0], released=False)
        scorer = scorer_for(slow, max_hold_s=10.0, alone=alone)
        task = asyncio.ensure_future(scorer.score(rows(0.1), 10.0))
        await until(lambda: slow.calls == [1])
        task.cancel()  # the HTTP client went away
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: slow.cancelled == 1)
        # Long before the 10 s hold: the cancelled round gave its slot back.
        await until(lambda: all_given_back(scorer))
        return True

    assert run(main())


@BOTH_PATHS
def test_a_stuck_member_does_not_stall_later_requests_in_the_queue(alone):
    async def main():
        quick = Group("g0", ["a"], [1.0])
        stuck = Group("g1", ["b"], [1.0], released=False)
        scorer = scorer_for(quick, stuck, max_hold_s=0.05, alone=alone)
        first = asyncio.ensure_future(scorer.score(rows(0.1), 30.0))
        await until(lambda: stuck.calls == [1])
        later = asyncio.ensure_future(scorer.score(rows(0.2), 30.0))
        # Queued behind a round that is still stuck, it goes out after max_hold_s anyway:
        # a second round reaches both groups while the first has not finished.
        while stuck.calls != [1, 1]:
            assert not later.done()
            await asyncio.sleep(0.01)
        assert not first.done()
        stuck.gate.set()
        answers = await first, await later
        await until(lambda: all_given_back(scorer))
        return quick, *answers, True

    quick, first, later, given_back = run(asyncio.wait_for(main(), 10))
    assert given_back
    assert quick.calls == [1, 1]
    assert [a.name for a in first.answers] == [a.name for a in later.answers] == ["a", "b"]


@BOTH_PATHS
def test_requests_caught_by_shutdown_get_an_answer_not_an_error(alone):
    async def main():
        slow = Group("g0", ["a"], [1.0], released=False)
        scorer = scorer_for(slow, max_hold_s=10.0, alone=alone)
        running = asyncio.ensure_future(scorer.score(rows(0.1), 10.0))
        await until(lambda: slow.calls == [1])
        queued = asyncio.ensure_future(scorer.score(rows(0.2), 10.0))
        await asyncio.sleep(0)
        scorer.close()  # replica shutdown
        answers = await running, await queued
        await until(lambda: all_given_back(scorer))
        return slow, *answers

    slow, running, queued = run(asyncio.wait_for(main(), 10))
    assert running.missing == {"a": "timeout"}  # its round was cancelled
    assert queued.missing == {"a": "shutdown"}  # it never went out
    assert slow.cancelled == 1


@BOTH_PATHS
def test_a_login_with_no_budget_left_sends_no_work(alone):
    async def main():
        group = Group("g0", ["a", "b"], [1.0, 1.0])
        scorer = scorer_for(group, alone=alone)
        result = await scorer.score(rows(0.1), 0.0)
        await until(lambda: all_given_back(scorer))
        return group, result

    group, result = run(main())
    assert group.calls == []  # nothing predicted for a login that could not use it
    assert result.answers == [] and result.missing == {"a": "timeout", "b": "timeout"}


def test_one_logins_bad_rows_leave_the_member_out_of_that_login_only():
    async def main():
        # Two logins in one round; the member's score for the second login's row is NaN.
        group = Group("g0", ["a"], [1.0], released=False, scores=np.array([[0.3, np.nan]]))
        other = Group("g1", ["b"], [1.0], released=False, scores=np.array([[0.6, 0.7]]))
        scorer = scorer_for(group, other)
        blocker = asyncio.ensure_future(scorer.score(rows(0.9), 0.01))  # holds the slot
        await until(lambda: group.calls == [1])
        pair = [
            asyncio.ensure_future(scorer.score(rows(0.1), 10.0)),
            asyncio.ensure_future(scorer.score(rows(0.2), 10.0)),
        ]
        await blocker
        await until(lambda: group.calls == [1, 2])
        group.gate.set()
        other.gate.set()
        return await asyncio.gather(*pair)

    clean, bad = run(main())
    assert [a.name for a in clean.answers] == ["a", "b"]
    np.testing.assert_allclose(clean.answers[0].scores, [0.3])
    assert [a.name for a in bad.answers] == ["b"]
    assert bad.missing == {"a": "bad_output"}


@pytest.mark.parametrize("reply", ["not scores", [[0.1, 0.2], [0.3]], {"a": 0.5}, [object()]])
def test_a_malformed_group_reply_is_bad_output_not_an_error(reply):
    async def main():
        broken = Group("g0", ["a"], [1.0], scores=reply)
        fine = Group("g1", ["b"], [1.0])
        return await Fanout([broken, fine]).score(rows(0.2, 0.4), 5.0)

    result = run(main())
    assert [a.name for a in result.answers] == ["b"]
    assert result.missing == {"a": "bad_output"}
