"""The circuit breaker: states under a controlled clock, and no lock held across calls."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.adapters.circuit_breaker import CircuitBreaker, CircuitOpen
from tests.support import ManualClock

pytestmark = pytest.mark.unit


def fail() -> None:
    raise OSError("connection refused")


def test_opens_after_fail_max_failures_in_a_row_and_refuses_without_calling():
    clock = ManualClock(0.0)
    breaker = CircuitBreaker(fail_max=3, reset_timeout_s=5, clock=clock)
    for _ in range(3):
        with pytest.raises(OSError):
            breaker.call(fail)
    assert breaker.state == "open"
    calls = []
    with pytest.raises(CircuitOpen):
        breaker.call(calls.append, 1)
    assert calls == []


def test_a_success_resets_the_failure_count():
    breaker = CircuitBreaker(fail_max=2, reset_timeout_s=5, clock=ManualClock(0.0))
    with pytest.raises(OSError):
        breaker.call(fail)
    assert breaker.call(lambda: "ok") == "ok"
    with pytest.raises(OSError):
        breaker.call(fail)
    assert breaker.state == "closed"


def test_after_the_reset_timeout_exactly_one_trial_goes_through():
    clock = ManualClock(0.0)
    breaker = CircuitBreaker(fail_max=1, reset_timeout_s=5, clock=clock)
    with pytest.raises(OSError):
        breaker.call(fail)
    clock.now = 5.0
    assert breaker.state == "half-open"
    trial = breaker.before_call()
    assert trial.trial
    with pytest.raises(CircuitOpen):
        breaker.before_call()  # anyone else while the trial runs
    breaker.record_failure(trial)
    assert breaker.state == "open"  # failed trial: open again for a full timeout
    clock.now = 9.9
    with pytest.raises(CircuitOpen):
        breaker.before_call()
    clock.now = 10.0
    assert breaker.call(lambda: 1) == 1
    assert breaker.state == "closed"


def test_calls_run_concurrently_while_closed():
    """No lock across the call: N calls that each wait for all N can only finish together."""
    breaker = CircuitBreaker(fail_max=5, reset_timeout_s=5)
    n = 8
    barrier = threading.Barrier(n, timeout=10)
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda i: breaker.call(barrier.wait), range(n)))
    assert sorted(results) == list(range(n))  # Barrier.wait returns a distinct index each


def test_calls_that_finish_after_the_circuit_opened_do_not_move_it():
    """Outcomes of calls admitted before the circuit opened describe the store as it was."""
    clock = ManualClock(0.0)
    breaker = CircuitBreaker(fail_max=2, reset_timeout_s=5, clock=clock)
    slow_ok, slow_failing = breaker.before_call(), breaker.before_call()  # still running...
    for _ in range(2):
        with pytest.raises(OSError):
            breaker.call(fail)
    assert breaker.state == "open"
    clock.now = 4.0
    breaker.record_success(slow_ok)  # a late success does not close the open circuit
    assert breaker.state == "open"
    breaker.record_failure(slow_failing)  # a late failure does not restart the timeout
    clock.now = 5.0
    trial = breaker.before_call()  # half-open at 5 s after opening, as if nothing came late
    breaker.record_success(trial)
    assert breaker.state == "closed"
