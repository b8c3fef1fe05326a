"""Recovery after a fault: measured from the client's logins, not from the service's state."""

import pytest

from loadtest.harness.open_loop import Shot
from loadtest.reliability.scenarios import recovered_after_s

pytestmark = pytest.mark.unit


def shot(t, ms, status, personalized=True, reason=None, retry_after=None):
    return Shot(t, ms, status, personalized, reason, retry_after)


def test_recovery_is_the_last_degraded_login_after_the_fault():
    before = [shot(t, 50, 200) for t in (1.0, 2.0)]
    during = [shot(5.5, 1000, 200, False, "no_members_answered"), shot(6.0, 20, 503)]
    after = [shot(t, 50, 200) for t in (7.0, 8.0)]
    unknown = [shot(7.5, 50, 200, False, "unknown_player")]  # no fault causes these
    assert recovered_after_s(before + during + after + unknown, 5.0) == 1.0
    assert recovered_after_s(before + after, 5.0) == 0.0
    assert recovered_after_s(before + during, 5.0) is None  # degraded until the end
