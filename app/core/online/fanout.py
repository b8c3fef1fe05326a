"""Parallel fan-out of one candidate matrix to every member group, bounded by time budgets.

A member group is whatever answers for several members with one call: a Serve deployment
hosting one member (the production layout) or several (small clusters), or in-process models.
Fan-out width is the number of groups.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from app.core.aggregation import MemberScores
from app.core.tally_log import TallyLog
from app.core.telemetry import NoTelemetry, Telemetry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberRef:
    name: str
    weight: float


class MemberGroupClient(Protocol):
    """Scores a candidate matrix for each of its members in one call."""

    name: str
    members: tuple[MemberRef, ...]

    def score(self, matrix: np.ndarray) -> Awaitable[np.ndarray]:
        """Shape (len(members), matrix rows): one row of propensities per member.

        A coroutine, or a future (then the round waits on it without a task of its own)."""
        ...


class EnsembleScorer(Protocol):
    """Scores one candidate matrix with the ensemble's members within a time budget."""

    async def score(self, matrix: np.ndarray, budget_s: float) -> FanoutResult: ...


@dataclass(frozen=True)
class FanoutResult:
    answers: list[MemberScores]
    # member name -> why it is missing from `answers` ("timeout", "bad_output" or error type)
    missing: dict[str, str] = field(default_factory=dict)
    elapsed_ms: float = 0.0


class FanoutRound:
    """One matrix in flight to every group. Several callers may each read their own rows of
    it with their own deadline; the round's unfinished work is cancelled when they are done."""

    def __init__(
        self,
        groups: Sequence[MemberGroupClient],
        matrix: np.ndarray,
        problems: TallyLog,
        *,
        quorum_weight: float = 0.0,
        straggler_grace_s: float | None = None,
        weights: Mapping[str, float] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.started = time.perf_counter()
        self._telemetry = telemetry or NoTelemetry()
        # Effective member weights (live overrides of the trained ones) for this round.
        self._weights = dict(weights or {})
        self.rows = matrix.shape[0]
        self._problems = problems  # failed or malformed group replies, logged as a tally
        self._tasks = {_start(g, matrix): g for g in groups}
        for task, group in self._tasks.items():
            task.add_done_callback(functools.partial(self._group_done, group))
        # Once groups holding quorum_weight have answered, the rest get straggler_grace_s
        # more, not the whole budget: a replica that died where Serve's router still sends
        # work (a lost node) or hangs otherwise would make every login wait its full budget.
        self._quorum_weight = quorum_weight
        self._grace_s = straggler_grace_s
        self._quorum_at: float | None = None
        # Validated answers per finished group, computed once however many callers read them.
        self._outcomes: dict[str, _Outcome] = {}
        self._finished = asyncio.gather(*self._tasks, return_exceptions=True)

    def _cutoff_s(self) -> float | None:
        """Seconds from now until stragglers stop being waited for, once the quorum is in."""
        if self._grace_s is None:
            return None
        if self._quorum_at is None:
            # Read from the tasks themselves, not from done callbacks: a task is done before
            # its callbacks run, and a reader must not miss the quorum in between.
            # Only usable answers count: a group whose reply is dropped (error, wrong shape)
            # must not start the grace and cut off the groups the quorum still needs.
            answered = sum(
                sum(self._weight(m) for m in group.members)
                for task, group in self._tasks.items()
                if task.done() and isinstance(self._outcome(task, group), np.ndarray)
            )
            if answered < self._quorum_weight or answered == 0:
                return None
            self._quorum_at = time.perf_counter()
        return self._quorum_at + self._grace_s - time.perf_counter()

    async def wait(self, timeout_s: float) -> None:
        """Until every group answered, `timeout_s` passed, or the stragglers' grace after the
        quorum ran out, whichever comes first; never cancels the groups."""
        end = time.perf_counter() + max(timeout_s, 0.0)
        while True:
            pending = [t for t in self._tasks if not t.done()]
            left = end - time.perf_counter()
            cutoff = self._cutoff_s()
            if cutoff is not None:
                left = min(left, cutoff)
            if not pending or left <= 0:
                return
            if self._grace_s is None:
                await asyncio.wait(pending, timeout=left)
                return
            await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)

    def when_finished(self, callback: Callable[[], None]) -> None:
        """Call `callback` once every group answered, failed or was cancelled."""
        self._finished.add_done_callback(lambda _: callback())

    def _group_done(self, group: MemberGroupClient, task: asyncio.Future[np.ndarray]) -> None:
        # Once per round and group, however many logins share the round.
        if task.cancelled() or task.exception() is not None:
            return
        latency_ms = (time.perf_counter() - self.started) * 1000.0
        for member in group.members:
            self._telemetry.member_latency(member.name, latency_ms)

    def _weight(self, member: MemberRef) -> float:
        return self._weights.get(member.name, member.weight)

    def cancel(self) -> None:
        """Stop work nobody waits for any more (budget spent or every caller gone)."""
        for task in self._tasks:
            task.cancel()

    def result(self, rows: slice | None = None) -> FanoutResult:
        """What has answered so far, restricted to `rows` of the round's matrix.

        Scores are judged per caller: a member whose scores for *these* rows are not
        probabilities (NaN, out of range) is left out of this caller's answer only; the other
        logins sharing the round keep it.
        """
        rows = rows or slice(0, self.rows)
        answers: list[MemberScores] = []
        missing: dict[str, str] = {}
        for task, group in self._tasks.items():
            outcome = self._outcome(task, group) if task.done() else "timeout"
            if isinstance(outcome, str):
                missing.update((member.name, outcome) for member in group.members)
                continue
            block = outcome[:, rows]
            # One check for the whole group's rows (False for NaN as well).
            valid = np.all((block >= 0.0) & (block <= 1.0), axis=1)
            for i, member in enumerate(group.members):
                weight = self._weight(member)
                if weight <= 0.0:
                    missing[member.name] = WEIGHTED_OUT
                elif valid[i]:
                    answers.append(MemberScores(member.name, weight, block[i]))
                else:
                    missing[member.name] = "bad_output"
        return FanoutResult(answers, missing, (time.perf_counter() - self.started) * 1000.0)

    def _outcome(self, task: asyncio.Future[np.ndarray], group: MemberGroupClient) -> _Outcome:
        if group.name in self._outcomes:
            return self._outcomes[group.name]
        outcome: _Outcome
        if task.cancelled():
            outcome = "timeout"
        elif (exc := task.exception()) is not None:
            self._problems.record(f"{group.name}: {type(exc).__name__}", str(exc))
            outcome = type(exc).__name__
        else:
            outcome = self._shaped(group, task.result())
        self._outcomes[group.name] = outcome
        return outcome

    def _shaped(self, group: MemberGroupClient, raw: object) -> _Outcome:
        # A reply of the wrong shape, or not numbers at all, is as good as no reply: using it
        # would fail the request or skew the offer. Only that group's members are left out.
        try:
            scores = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            self._problems.record(f"{group.name}: non-numeric scores", str(exc))
            return "bad_output"
        if scores.shape != (len(group.members), self.rows):
            expected = (len(group.members), self.rows)
            self._problems.record(
                f"{group.name}: wrong shape", f"{scores.shape} instead of {expected}"
            )
            return "bad_output"
        return scores


def _start(group: MemberGroupClient, matrix: np.ndarray) -> asyncio.Future[np.ndarray]:
    """The group's call as a future of this loop. A group that fails before it even returns
    an awaitable (e.g. its worker thread shut down) is that group's failure, not the round's."""
    try:
        return asyncio.ensure_future(group.score(matrix))
    except Exception as exc:
        failed: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        failed.set_exception(exc)
        return failed


# Why a member with a live weight of 0 is not in an answer.
WEIGHTED_OUT = "weighted_out"

# A group's scores, shape (members, rows), or why it has none ("timeout", "bad_output",
# the error type).
_Outcome = np.ndarray | str


class Fanout:
    """Sends one matrix to all member groups at once and keeps whatever answered in time."""

    def __init__(
        self,
        groups: Sequence[MemberGroupClient],
        member_order: Sequence[str] | None = None,
        *,
        quorum: float = 0.0,
        straggler_grace_s: float | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """`quorum` (share of the members' weight) and `straggler_grace_s`: once members
        holding the quorum answered, wait at most the grace for the others (None: until the
        caller's budget)."""
        if not groups:
            raise ValueError("an ensemble needs at least one member group")
        names = [m.name for g in groups for m in g.members]
        if len(set(names)) != len(names):
            raise ValueError(f"a member belongs to two groups: {names}")
        if member_order is not None and sorted(member_order) != sorted(names):
            raise ValueError(f"member order {member_order} does not name the groups' members")
        self.groups = tuple(groups)
        # Manifest order (groups may hold any subset), so answers are listed and summed in
        # the same order as offline scoring.
        self.member_order = {name: i for i, name in enumerate(member_order or names)}
        # A dead member fails every round: one line per interval, not one per login.
        self._problems = TallyLog(logger, "member group failures")
        self.telemetry = telemetry or NoTelemetry()
        self.trained_weights = {m.name: m.weight for g in groups for m in g.members}
        self.configure(quorum=quorum, straggler_grace_s=straggler_grace_s)

    def configure(
        self,
        *,
        quorum: float,
        straggler_grace_s: float | None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        """Live knobs; rounds already in flight keep the values they started with."""
        self._weights = {**self.trained_weights, **(weights or {})}
        self._quorum_weight = quorum * sum(self._weights.values())
        self._grace_s = straggler_grace_s

    def launch(self, matrix: np.ndarray) -> FanoutRound:
        return FanoutRound(
            self.groups,
            matrix,
            self._problems,
            quorum_weight=self._quorum_weight,
            straggler_grace_s=self._grace_s,
            weights=self._weights,
            telemetry=self.telemetry,
        )

    def ordered(self, result: FanoutResult) -> FanoutResult:
        answers = sorted(result.answers, key=lambda a: self.member_order[a.name])
        return FanoutResult(answers, result.missing, result.elapsed_ms)

    async def score(self, matrix: np.ndarray, budget_s: float) -> FanoutResult:
        round_ = self.launch(matrix)
        try:
            await round_.wait(budget_s)
        finally:
            # Normal end: stragglers are out of budget. CancelledError (e.g. the client
            # disconnected): nobody wants any of it.
            round_.cancel()
        return self.ordered(round_.result())
