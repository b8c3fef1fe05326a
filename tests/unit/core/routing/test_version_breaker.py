"""The per-version breaker: trips on failures in a row, lets one probe through per open_s
(taken by the login sent, not by asking), closes on any answer. Time is a fake clock."""

import pytest

from app.core.routing.version_breaker import VersionBreaker

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def breaker(trip_after=3, open_s=1.0):
    clock = Clock()
    return VersionBreaker(trip_after=trip_after, open_s=open_s, clock=clock), clock


def test_it_trips_only_on_failures_in_a_row():
    b, clock = breaker()
    b.failed("v", "timeout")
    b.failed("v", "timeout")
    b.succeeded("v")  # an answer in between: the count starts again
    clock.now += 0.5
    b.failed("v", "timeout")
    b.failed("v", "timeout")
    assert b.skip_reason("v") is None
    b.failed("v", "failed")
    assert b.skip_reason("v") == "failed"  # the reason of the last failure
    assert b.skip_reason("other") is None  # per version


def test_one_probe_per_open_s_and_an_answer_closes_it():
    b, clock = breaker()
    for _ in range(3):
        b.failed("v", "timeout")
    clock.now += 0.99
    assert b.skip_reason("v") == "timeout"
    clock.now += 0.02
    # Asking takes nothing: a router asks of every version it might try.
    assert [b.skip_reason("v") for _ in range(3)] == [None] * 3
    assert b.claim("v") is None  # the probe, sent
    assert b.skip_reason("v") == "timeout"  # the others keep skipping meanwhile
    assert b.claim("v") == "timeout"
    b.failed("v", "timeout")  # the probe found it still down
    clock.now += 0.5
    assert b.claim("v") == "timeout"
    clock.now += 0.6
    assert b.claim("v") is None  # the next probe
    b.succeeded("v")
    assert [b.claim("v") for _ in range(5)] == [None] * 5


def test_a_probe_that_never_reports_does_not_keep_the_version_skipped():
    """A probe whose caller went away (cancelled) reports nothing; the next probe comes
    open_s later all the same."""
    b, clock = breaker()
    for _ in range(3):
        b.failed("v", "timeout")
    clock.now += 1.0
    assert b.claim("v") is None  # probe, never reported
    clock.now += 1.0
    assert b.claim("v") is None  # another


def test_failures_while_the_version_still_answers_do_not_trip_it():
    """One dead replica fails every login it held at once, while the version's other
    replicas answer: not the version being down."""
    b, clock = breaker()
    b.succeeded("v")
    clock.now += 0.1
    for _ in range(5):
        b.failed("v", "failed")
    assert b.skip_reason("v") is None
    clock.now += 0.4  # nothing answered for quiet_s: the next failure trips it
    b.failed("v", "failed")
    assert b.skip_reason("v") == "failed"


@pytest.mark.parametrize(("trip_after", "open_s"), [(0, 1.0), (3, 0.0)])
def test_nonsense_settings_are_refused(trip_after, open_s):
    with pytest.raises(ValueError):
        VersionBreaker(trip_after=trip_after, open_s=open_s)


def test_a_failure_says_whether_it_opened_the_breaker():
    clock = [0.0]
    breaker = VersionBreaker(trip_after=2, open_s=1.0, quiet_s=0.0, clock=lambda: clock[0])
    assert breaker.failed("v", "timeout") is False
    assert breaker.failed("v", "timeout") is True
    # A try sent before it opened fails late: already open, nothing newly opened.
    assert breaker.failed("v", "timeout") is False
    clock[0] += 1.0
    assert breaker.claim("v") is None  # the probe
    assert breaker.failed("v", "timeout") is False  # the probe failed: still open
    assert breaker.skip_reason("v") == "timeout"
    breaker.succeeded("v")
    assert breaker.failed("v", "failed") is False
    assert breaker.failed("v", "failed") is True  # closed, then opened again


def test_a_version_up_again_is_closed_without_a_probe():
    clock = [0.0]
    b = VersionBreaker(trip_after=1, open_s=1.0, clock=lambda: clock[0])
    assert b.failed("v1", "unavailable")
    assert b.skip_reason("v1") == "unavailable"
    b.up_again("v1")
    assert not b.is_open("v1") and b.skip_reason("v1") is None
    assert b.claim("v1") is None and b.claim("v1") is None  # no probe: every login goes
    b.up_again("v2")  # never tripped: nothing to close
    assert b.skip_reason("v2") is None


def test_a_version_found_down_opens_at_once_whatever_the_count_and_quiet_time():
    clock = [0.0]
    b = VersionBreaker(trip_after=3, open_s=1.0, quiet_s=0.5, clock=lambda: clock[0])
    b.succeeded("v1")  # an answer just now
    assert not b.failed("v1", "timeout")  # a guess from silence: counted, still closed
    assert b.failed("v1", "unavailable", down=True)
    assert b.skip_reason("v1") == "unavailable"
    assert not b.failed("v1", "unavailable", down=True)  # already open
