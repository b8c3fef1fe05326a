"""Recurring warnings are logged as a tally per interval: the first at once, then summaries."""

import logging

import pytest

from app.core.tally_log import TallyLog
from tests.support import ManualClock

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.fixture
def recorded():
    logger = logging.getLogger("test.tally_log")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, records
    logger.removeHandler(handler)


def messages(records):
    return [r.getMessage() for r in records]


def test_first_event_is_logged_at_once_then_summarized_per_interval(recorded):
    logger, records = recorded
    clock = ManualClock(1000.0)
    log = TallyLog(logger, "fallback answers", interval_s=10, clock=clock)
    log.record("feature_store_unavailable", "EndpointConnectionError")
    assert messages(records) == [
        "fallback answers (feature_store_unavailable): EndpointConnectionError"
    ]
    for _ in range(500):
        clock.now += 0.01
        log.record("feature_store_unavailable", "EndpointConnectionError")
        log.tick()
    log.record("quorum", "missing {'m1': 'timeout'}")
    assert len(records) == 1  # 501 more inside the interval: no new line
    clock.now = 1010.0  # 10 s after the first event
    log.tick()  # a request after the interval: the tally goes out without a new event
    assert len(records) == 2
    summary = records[-1].getMessage()
    assert summary.startswith("501 more fallback answers in the last 10s")
    assert "feature_store_unavailable=500" in summary and "quorum=1" in summary


def test_after_a_quiet_interval_the_next_event_is_logged_at_once_again(recorded):
    logger, records = recorded
    clock = ManualClock(1000.0)
    log = TallyLog(logger, "fallback answers", interval_s=10, clock=clock)
    log.record("quorum", "a")
    clock.now += 30
    log.tick()  # the interval ended with nothing more to report
    log.record("quorum", "b")
    assert messages(records) == ["fallback answers (quorum): a", "fallback answers (quorum): b"]


def test_flush_writes_the_pending_tally_at_shutdown(recorded):
    logger, records = recorded
    clock = ManualClock(1000.0)
    log = TallyLog(logger, "member group failures", interval_s=10, clock=clock)
    log.record("member-group-0: ActorDiedError", "replica died")
    log.record("member-group-0: ActorDiedError", "replica died")
    clock.now += 1
    log.flush()
    assert len(records) == 2
    assert records[-1].getMessage().startswith("1 more member group failures in the last 1s")
