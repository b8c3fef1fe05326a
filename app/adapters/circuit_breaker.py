"""A circuit breaker that never holds its lock across the call it guards.

The caller asks before the call (`before_call`) and reports the outcome after it
(`record_success` / `record_failure`). The lock only covers those state changes, so any number
of calls run at once while the circuit is closed. (pybreaker's `CircuitBreaker.call` holds
its lock for the whole wrapped call, which made every DynamoDB read of a process wait for the
one before it.)

States: closed (calls go through; `fail_max` failures in a row open it), open (calls are
refused at once until `reset_timeout_s` has passed), half-open (exactly one trial call goes
through; its success closes the circuit, its failure opens it again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

R = TypeVar("R")
State = Literal["closed", "open", "half-open"]


class CircuitOpen(RuntimeError):
    """The call was refused without being made: the circuit is open."""


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
        self._trial_running = False

    @property
    def state(self) -> State:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            if self._trial_running or self._clock() - self._opened_at >= self._reset_timeout_s:
                return "half-open"
            return "open"

    def before_call(self) -> None:
        """Raises CircuitOpen unless the call may go ahead."""
        with self._lock:
            if self._opened_at is None:
                return
            if self._trial_running or self._clock() - self._opened_at < self._reset_timeout_s:
                raise CircuitOpen("circuit open: calls failed repeatedly, not calling for now")
            self._trial_running = True  # this caller makes the one trial call

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_running = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._trial_running or self._failures >= self._fail_max:
                self._opened_at = self._clock()
            self._trial_running = False

    def call(self, fn: Callable[..., R], *args: object) -> R:
        """`fn(*args)` if the circuit allows it, with its outcome recorded."""
        self.before_call()
        try:
            result = fn(*args)
        except BaseException:
            self.record_failure()
            raise
        self.record_success()
        return result
