"""Fallbacks are logged as a tally per interval: the first at once, then one summary line."""

import logging

import pytest

from app.core.fallback_log import FallbackLog

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def recorded():
    logger = logging.getLogger("test.fallback_log")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, records
    logger.removeHandler(handler)


def test_first_fallback_is_logged_at_once_then_summarized_per_interval(recorded):
    logger, records = recorded
    clock = Clock()
    log = FallbackLog(logger, interval_s=10, clock=clock)
    log.record("feature_store_unavailable", "EndpointConnectionError")
    assert len(records) == 1
    for _ in range(500):
        clock.now += 0.01
        log.record("feature_store_unavailable", "EndpointConnectionError")
    log.record("quorum", "missing {'m1': 'timeout'}")
    assert len(records) == 1  # 501 more fallbacks inside the interval: no new line
    clock.now += 10
    log.record("quorum", "missing {'m1': 'timeout'}")
    assert len(records) == 2
    summary = records[-1].getMessage()
    assert "501 fallback answers" in summary
    assert "feature_store_unavailable=500" in summary and "quorum=1" in summary


def test_a_quiet_interval_makes_the_next_fallback_log_at_once_again(recorded):
    logger, records = recorded
    clock = Clock()
    log = FallbackLog(logger, interval_s=10, clock=clock)
    log.record("quorum", "a")
    clock.now += 30
    log.flush()  # the quiet interval ends with nothing to report
    log.record("quorum", "b")
    assert [r.getMessage() for r in records] == [
        "fallback answer (quorum): a",
        "fallback answer (quorum): b",
    ]
