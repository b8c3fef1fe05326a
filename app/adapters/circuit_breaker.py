"""A circuit breaker that never holds its lock across the call it guards.

The caller asks before the call (`before_call`, which hands out a ticket) and reports the
outcome with that ticket after it (`record_success` / `record_failure`). The lock only covers
those state changes, so any number of calls run at once while the circuit is closed.
(pybreaker's `CircuitBreaker.call` holds its lock for the whole wrapped call, which made every
DynamoDB read of a process wait for the one before it.)

States: closed (calls go through; `fail_max` failures in a row open it), open (calls are
refused at once until `reset_timeout_s` has passed), half-open (exactly one trial call goes
through; its success closes the circuit, its failure opens it again).

With calls running concurrently, some finish after the circuit changed state. Their outcomes
describe the store as it was when they started, so they do not move the circuit: a late
success does not close an open circuit, a late failure does not restart its timeout, and
neither decides a trial. Only calls admitted since the last opening count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

R = TypeVar("R")
State = Literal["closed", "open", "half-open"]


class CircuitOpen(RuntimeError):
    """The call was refused without being made: the circuit is open."""


@dataclass(frozen=True)
class Ticket:
    """Admission to one call: the circuit's generation then, and whether it is the trial."""

    generation: int
    trial: bool


class CircuitBreaker:
    def __init__(
        self,
        *,
        fail_max: int,
        reset_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fail_max < 1 or reset_timeout_s <= 0:
            raise ValueError("fail_max must be >= 1 and reset_timeout_s > 0")
        self._fail_max = fail_max
        self._reset_timeout_s = reset_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._generation = 0  # +1 each time the circuit opens
        self._trial_running = False

    @property
    def state(self) -> State:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            if self._trial_running or self._clock() - self._opened_at >= self._reset_timeout_s:
                return "half-open"
            return "open"

    def before_call(self) -> Ticket:
        """A ticket for the call, or CircuitOpen if it must not be made."""
        with self._lock:
            if self._opened_at is None:
                return Ticket(self._generation, trial=False)
            if self._trial_running or self._clock() - self._opened_at < self._reset_timeout_s:
                raise CircuitOpen("circuit open: calls failed repeatedly, not calling for now")
            self._trial_running = True  # this caller makes the one trial call
            return Ticket(self._generation, trial=True)

    def record_success(self, ticket: Ticket) -> None:
        with self._lock:
            if not self._counts(ticket):
                return
            self._failures = 0
            self._opened_at = None
            self._trial_running = False

    def record_failure(self, ticket: Ticket) -> None:
        with self._lock:
            if not self._counts(ticket):
                return
            self._failures += 1
            if ticket.trial or self._failures >= self._fail_max:
                self._opened_at = self._clock()
                self._generation += 1
                self._failures = 0
            self._trial_running = False

    def _counts(self, ticket: Ticket) -> bool:
        if ticket.trial:
            return True
        # Admitted while closed: counts only if the circuit has not opened since.
        return ticket.generation == self._generation and self._opened_at is None

    def call(self, fn: Callable[..., R], *args: object) -> R:
        """`fn(*args)` if the circuit allows it, with its outcome recorded."""
        ticket = self.before_call()
        try:
            result = fn(*args)
        except BaseException:
            self.record_failure(ticket)
            raise
        self.record_success(ticket)
        return result
