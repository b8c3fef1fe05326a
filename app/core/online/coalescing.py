"""Coalescing concurrent calls into batches: one fan-out (or one BatchGetItem) for many logins.

The policy is "send now if a slot is free, otherwise batch up behind the work in flight":
at low load a call goes out on the next event-loop turn (no added wait), under load every
call that arrives while `max_in_flight` batches are running joins the next batch. Batch size
therefore grows with load by itself, with no timer to tune. A caller that knows it is alone
may skip that turn: it claims a free slot at once and runs its work itself
(`Coalescer.claim_if_idle`, the scorer's lone-login path).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from app.core.online.fanout import Fanout, FanoutResult, FanoutRound

Item = TypeVar("Item")
Out = TypeVar("Out")


@dataclass
class _Slot:
    """One batch's claim on an in-flight slot, given back exactly once."""

    freed: bool = False


@dataclass
class Pending(Generic[Item, Out]):
    item: Item
    size: int
    future: asyncio.Future[Out]


class Coalescer(Generic[Item, Out]):
    """Queues submitted items and hands them to `run` in batches of at most `max_size`.

    `run(batch)` must resolve every pending future it is given (skipping ones already done:
    their caller gave up). A batch holds its in-flight slot until `run` returns; a slot
    claimed with `claim_if_idle` is held until its claimer calls `free`.
    """

    def __init__(
        self,
        run: Callable[[list[Pending[Item, Out]]], Awaitable[None]],
        *,
        max_size: int,
        max_in_flight: int,
    ) -> None:
        if max_size < 1 or max_in_flight < 1:
            raise ValueError("max_size and max_in_flight must be at least 1")
        self._run = run
        self.max_size = max_size
        self.max_in_flight = max_in_flight
        self._queue: deque[Pending[Item, Out]] = deque()
        self._in_flight = 0
        self._flush_scheduled = False
        self._batches: set[asyncio.Future[None]] = set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def claim_if_idle(self) -> _Slot | None:
        """A slot taken at once for a lone call: nothing queued, nothing in flight, no flush
        pending. The caller runs the work itself and gives the slot back with `free`.

        Skips the flush's loop turn and the batch's task, which at low load are most of
        what coalescing adds to a call. A call made later in the same turn batches behind
        it instead of with it: only for a caller that knows it is alone.
        """
        if self._queue or self._in_flight or self._flush_scheduled:
            return None
        self._in_flight += 1
        return _Slot()

    def configure(self, *, max_size: int, max_in_flight: int) -> None:
        """New limits for the batches taken from now on (live knobs)."""
        if max_size < 1 or max_in_flight < 1:
            raise ValueError("max_size and max_in_flight must be at least 1")
        self.max_size = max_size
        self.max_in_flight = max_in_flight
        if self._queue:  # a higher limit may let queued calls go at once
            self._schedule_flush()

    def enqueue(self, item: Item, size: int = 1) -> asyncio.Future[Out]:
        """The future of the item's result; cancelling it drops the item if still queued."""
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queue.append(Pending(item, size, future))
        self._schedule_flush()
        return future

    async def submit(self, item: Item, size: int = 1) -> Out:
        """The item's result. Cancelling the caller drops the item if it is still queued."""
        return await self.enqueue(item, size)

    def _schedule_flush(self) -> None:
        # call_soon rather than flushing inline: calls made in the same loop turn (e.g. a
        # burst of requests parsed together) share one batch at no latency cost.
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._queue and self._in_flight < self.max_in_flight:
            batch = self._take_batch()
            if not batch:
                continue
            self._in_flight += 1
            slot = _Slot()
            task = asyncio.ensure_future(self._run_batch(batch, slot))
            self._batches.add(task)
            # Also runs for a task cancelled before it ever started (its try/finally never
            # ran): the slot is always given back and every caller always answered.
            task.add_done_callback(functools.partial(self._batch_done, batch, slot))

    def _take_batch(self) -> list[Pending[Item, Out]]:
        batch: list[Pending[Item, Out]] = []
        size = 0
        while self._queue:
            head = self._queue[0]
            if head.future.done():  # its caller was cancelled while it queued
                self._queue.popleft()
                continue
            if batch and size + head.size > self.max_size:
                break
            batch.append(self._queue.popleft())
            size += head.size
        return batch

    async def _run_batch(self, batch: list[Pending[Item, Out]], slot: _Slot) -> None:
        try:
            await self._run(batch)
        finally:
            # Free the slot as soon as `run` returns, before its callers resume.
            self.free(slot)

    def free(self, slot: _Slot) -> None:
        """Give a slot back, a batch's or a claimed one (once; later calls do nothing)."""
        if not slot.freed:
            slot.freed = True
            self._in_flight -= 1
            if self._queue:
                self._schedule_flush()

    def _batch_done(
        self, batch: list[Pending[Item, Out]], slot: _Slot, task: asyncio.Future[None]
    ) -> None:
        self._batches.discard(task)
        self.free(slot)
        # Every caller gets an answer: the batch's failure, or cancellation if the batch was
        # cancelled (a cancelled batch is not an error the caller should see as one).
        error = None if task.cancelled() else task.exception()
        for pending in batch:
            if pending.future.done():
                continue
            if task.cancelled():
                pending.future.cancel()
            elif error is not None:
                pending.future.set_exception(error)
            else:
                pending.future.set_exception(
                    RuntimeError("the batch finished without answering this call")
                )

    def close(self) -> None:
        """Cancel queued calls and running batches (shutdown); their callers are cancelled."""
        while self._queue:
            self._queue.popleft().future.cancel()
        for task in list(self._batches):
            task.cancel()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _why_not_sent(queued: asyncio.Future[_Share]) -> str:
    if not queued.done():
        return "timeout"
    if queued.cancelled():
        return "shutdown"
    return type(queued.exception()).__name__


@dataclass(frozen=True)
class _Share:
    """One caller's part of a coalesced fan-out round."""

    round: FanoutRound
    rows: slice


class CoalescingScorer:
    """An EnsembleScorer that sends one fan-out per batch of concurrent requests.

    Each request still keeps its own deadline: it reads its rows of the shared round as soon as
    every group answered or its own budget ran out, whichever comes first. The round's
    stragglers are cancelled once no request waits for them any more.
    """

    def __init__(
        self,
        fanout: Fanout,
        *,
        max_rows: int,
        max_in_flight: int,
        max_hold_s: float,
        alone: Callable[[], bool] | None = None,
    ) -> None:
        """`alone()`: whether the calling login is the only one in progress (the replica's
        admission count). A lone login finding the scorer idle starts its round in its own
        task (`_score_alone`). Any other waits a loop turn, so that logins reaching the
        scorer in the same turn (e.g. their batched feature read resolved together) share
        one round. None: every login waits that turn."""
        self._fanout = fanout
        self._alone = alone
        self._max_hold_s = max_hold_s
        self._coalescer: Coalescer[np.ndarray, _Share] = Coalescer(
            self._run, max_size=max_rows, max_in_flight=max_in_flight
        )
        self._readers: dict[FanoutRound, int] = {}

    def configure(self, *, max_rows: int, max_in_flight: int, max_hold_s: float) -> None:
        """Live limits: the next batch taken uses them; batches in flight are left alone."""
        if max_rows < 1 or max_in_flight < 1 or max_hold_s <= 0:
            raise ValueError("max_rows and max_in_flight must be >= 1, max_hold_s > 0")
        self._max_hold_s = max_hold_s
        self._coalescer.configure(max_size=max_rows, max_in_flight=max_in_flight)

    async def score(self, matrix: np.ndarray, budget_s: float) -> FanoutResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(budget_s, 0.0)
        if self._alone is not None and self._alone():
            slot = self._coalescer.claim_if_idle()
            if slot is not None:
                return await self._score_alone(matrix, deadline, slot)
        queued = self._coalescer.enqueue(matrix, matrix.shape[0])
        try:
            await asyncio.wait([queued], timeout=max(budget_s, 0.0))
        except asyncio.CancelledError:
            self._abandon(queued)
            raise
        if not queued.done() or queued.cancelled() or queued.exception() is not None:
            # Queued behind full rounds for the whole budget, dropped at shutdown (close()),
            # or the round could not start: nobody answered in time.
            why = _why_not_sent(queued)
            self._abandon(queued)
            return self._unanswered(why, budget_s * 1000.0)
        share = queued.result()
        try:
            await share.round.wait(deadline - loop.time())
            return self._fanout.ordered(share.round.result(share.rows))
        finally:
            self._release(share.round)

    async def _score_alone(
        self, matrix: np.ndarray, deadline: float, slot: _Slot
    ) -> FanoutResult:
        """A lone login's round, started in the caller's own task (see claim_if_idle).

        The same round, slot hold and deadline as a batch of one, without the flush's turn,
        the batch's task or the wait for a share: at c=1 those were most of the loop's work
        per login.
        """
        loop = asyncio.get_running_loop()
        if deadline <= loop.time():  # no predict for a login that can no longer use it
            self._coalescer.free(slot)
            return self._unanswered("timeout", 0.0)
        try:
            round_ = self._launch(matrix, readers=1)
        except Exception as exc:  # as in a batch: every member missing, not an error
            self._coalescer.free(slot)
            return self._unanswered(type(exc).__name__, 0.0)
        except BaseException:
            self._coalescer.free(slot)
            raise
        self._hold(round_, functools.partial(self._coalescer.free, slot))
        try:
            await round_.wait(deadline - loop.time())
            return self._fanout.ordered(round_.result())
        finally:
            self._release(round_)

    def _unanswered(self, why: str, elapsed_ms: float) -> FanoutResult:
        return FanoutResult([], {name: why for name in self._fanout.member_order}, elapsed_ms)

    async def _run(self, batch: list[Pending[np.ndarray, _Share]]) -> None:
        if all(p.future.done() for p in batch):  # every caller gave up after the flush
            return
        matrix = batch[0].item if len(batch) == 1 else np.concatenate([p.item for p in batch])
        round_ = self._launch(matrix, readers=len(batch))
        start = 0
        for pending in batch:
            rows = slice(start, start + pending.size)
            start += pending.size
            if pending.future.done():  # caller gone between batching and launch
                self._release(round_)
            else:
                pending.future.set_result(_Share(round_, rows))
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hold(round_, functools.partial(_resolve, held))
        await held

    def _launch(self, matrix: np.ndarray, *, readers: int) -> FanoutRound:
        self._fanout.telemetry.batch(readers, matrix.shape[0])
        round_ = self._fanout.launch(matrix)
        self._readers[round_] = readers
        return round_

    def _hold(self, round_: FanoutRound, release: Callable[[], None]) -> None:
        """Call `release` (idempotent) when the round finished or after max_hold_s, whichever
        comes first: how long it keeps its in-flight slot, so that logins arriving meanwhile
        batch up behind it.

        At most max_hold_s: a slow or stuck member must not hold every later login in the
        queue until its deadline. The round's readers keep waiting regardless.
        """
        timer = asyncio.get_running_loop().call_later(self._max_hold_s, release)

        def finished() -> None:
            timer.cancel()
            release()

        round_.when_finished(finished)

    def _abandon(self, queued: asyncio.Future[_Share]) -> None:
        if not queued.done():
            queued.cancel()  # still queued: it will not join a round
        elif not queued.cancelled() and queued.exception() is None:
            self._release(queued.result().round)

    def _release(self, round_: FanoutRound) -> None:
        readers = self._readers.get(round_)
        if readers is None:  # already cancelled by close()
            return
        left = readers - 1
        if left > 0:
            self._readers[round_] = left
            return
        del self._readers[round_]
        round_.cancel()

    def close(self) -> None:
        """Cancel queued logins and every round in flight (replica shutdown)."""
        self._coalescer.close()
        for round_ in list(self._readers):
            round_.cancel()
        self._readers.clear()
