"""The reliability runner's bookkeeping: every login counted once, recovery measured."""

import pytest

from loadtest.open_loop import Shot, burst, constant_rate, summarize
from loadtest.reliability import recovered_after_s

pytestmark = pytest.mark.unit


def shot(t, ms, status, personalized=True, reason=None, retry_after=None):
    return Shot(t, ms, status, personalized, reason, retry_after)


def test_summary_separates_refusals_errors_and_lost_logins():
    shots = [
        shot(0.0, 40, 200),
        shot(0.1, 60, 200, False, "quorum"),
        shot(0.2, 900, 200),
        shot(0.3, 5, 503, retry_after="1"),
        shot(0.4, 8, 503),  # a refusal without Retry-After is counted as such
        shot(0.5, 30, 500),
        shot(0.6, 10_000, None),
    ]
    s = summarize(shots)
    assert (s["sent"], s["answered"], s["no_answer"]) == (7, 6, 1)
    assert s["status_counts"] == {"200": 3, "500": 1, "503": 2, "no_answer": 1}
    assert s["http_5xx_non503"] == 1
    assert s["refused_without_retry_after"] == 1
    # Latency percentiles cover accepted (non-503) answers only; refusals have their own.
    assert s["client_max_ms"] == 900
    assert s["refusal_p99_ms"] == 8
    assert s["fallback_share_by_reason"] == {"quorum": pytest.approx(1 / 3, abs=1e-4)}


def test_recovery_is_the_last_degraded_login_after_the_fault():
    before = [shot(t, 50, 200) for t in (1.0, 2.0)]
    during = [shot(5.5, 1000, 200, False, "no_members_answered"), shot(6.0, 20, 503)]
    after = [shot(t, 50, 200) for t in (7.0, 8.0)]
    unknown = [shot(7.5, 50, 200, False, "unknown_player")]  # no fault causes these
    assert recovered_after_s(before + during + after + unknown, 5.0) == 1.0
    assert recovered_after_s(before + after, 5.0) == 0.0
    assert recovered_after_s(before + during, 5.0) is None  # degraded until the end


def test_schedules():
    assert constant_rate(4, 1.5) == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert burst(3) == [0.0, 0.0, 0.0]
