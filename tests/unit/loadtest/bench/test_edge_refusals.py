"""The bench's record of who refused a step's logins: the difference of two readings of
HAProxy's counters, or nothing when they cannot be trusted."""

import pytest

from loadtest.bench.measure import _refusals_during
from loadtest.harness.haproxy_admin import Refusals, RefusalsReading

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def readings(*values):
    """A reader that returns `values` one after another (an OSError for an Exception)."""
    queue = list(values)

    def read():
        value = queue.pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    return read


def test_a_step_records_what_was_refused_while_it_ran():
    read = readings(
        RefusalsReading(10, Refusals(1, 0, 2, 1)), RefusalsReading(10, Refusals(4, 1, 5, 5))
    )
    result, refused = _refusals_during(read, lambda: "locust result")
    assert result == "locust result"
    assert refused == {"queue_full": 3, "queue_timeout": 1, "servers_5xx": 3, "haproxy_5xx": 4}


@pytest.mark.parametrize(
    "before",
    [Refusals(40, 3, 9, 43), Refusals()],  # a restart is caught even from all zeros
)
def test_counters_of_another_haproxy_process_are_not_a_record(before):
    # Serve replaces HAProxy when the replicas change; the new process counts from zero.
    read = readings(RefusalsReading(10, before), RefusalsReading(11, Refusals(76, 10, 3, 86)))
    assert _refusals_during(read, lambda: None) == (None, None)


def test_no_haproxy_or_an_unreadable_socket_records_nothing():
    assert _refusals_during(None, lambda: 7) == (7, None)
    read = readings(RefusalsReading(10, Refusals()), OSError("gone"))
    assert _refusals_during(read, lambda: 7) == (7, None)
