"""The admission gate and the front proxy's arrival stamp."""

import pytest

from app.core.admission import MAX_EDGE_WAIT_S, AdmissionGate, parse_request_start

pytestmark = pytest.mark.unit


def test_gate_admits_up_to_its_bound_then_refuses_until_one_leaves():
    gate = AdmissionGate(2)
    assert gate.try_enter() and gate.try_enter()
    assert not gate.try_enter()
    assert (gate.in_flight, gate.admitted, gate.refused) == (2, 2, 1)
    gate.leave()
    assert gate.try_enter()
    assert (gate.in_flight, gate.admitted, gate.refused) == (2, 3, 1)


def test_a_login_is_alone_only_while_no_other_is_in_flight():
    gate = AdmissionGate(4)
    assert gate.try_enter() and gate.alone()
    assert gate.try_enter() and not gate.alone()  # the two could share a fan-out
    gate.leave()
    assert gate.alone()


def test_gate_rejects_a_leave_without_an_enter_and_a_zero_bound():
    with pytest.raises(RuntimeError):
        AdmissionGate(1).leave()
    with pytest.raises(ValueError):
        AdmissionGate(0)


NOW = 1_790_000_000.0


@pytest.mark.parametrize(
    ("header", "waited"),
    [
        (f"t={NOW - 0.25:.3f}", 0.25),  # seconds with a fraction (nginx $msec)
        (f"t={int((NOW - 0.25) * 1000)}", 0.25),  # milliseconds (HAProxy %Ts%ms)
        (str(int((NOW - 0.25) * 1e6)), 0.25),  # microseconds, no prefix
        (f"t={NOW + 0.5}", 0.0),  # a little clock skew ahead reads as no wait
    ],
)
def test_request_start_units_are_told_apart_by_magnitude(header, waited):
    assert parse_request_start(header, NOW) == pytest.approx(waited, abs=1e-3)


@pytest.mark.parametrize(
    "header", [None, "", "t=", "t=abc", f"t={NOW - MAX_EDGE_WAIT_S - 1}", f"t={NOW + 3600}"]
)
def test_unreadable_or_implausible_request_start_is_ignored(header):
    assert parse_request_start(header, NOW) is None
