"""The admission gate and the front proxy's arrival stamp."""

import asyncio

import pytest

from app.core.admission import (
    MAX_EDGE_WAIT_S,
    AdmissionGate,
    parse_request_start,
    waited_since,
)

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


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


def test_a_routed_login_waits_for_a_freed_slot_first_come_first_served():
    from app.core.load_meter import LoadMeter

    meter = LoadMeter(1)
    gate = AdmissionGate(1, load=meter)

    async def scenario():
        assert await gate.enter_within(0.0)  # room: at once, no wait needed
        order = []

        async def routed(name):
            assert await gate.enter_within(30.0)
            order.append(name)

        first = asyncio.create_task(routed("first"))
        await asyncio.sleep(0)
        second = asyncio.create_task(routed("second"))
        await asyncio.sleep(0)
        gate.leave()
        # The slot is taken for the oldest waiter as it frees: an HTTP login arriving before
        # it resumes is refused, not let in ahead of it.
        assert gate.in_flight == 1 and not gate.try_enter()
        await first
        gate.leave()
        await second
        assert order == ["first", "second"]
        gate.leave()

    asyncio.run(scenario())
    assert (gate.in_flight, gate.admitted, gate.refused) == (0, 3, 1)
    assert meter.level == 0  # the load signal followed every slot, handed over or not


def test_a_routed_login_whose_wait_runs_out_is_refused_holding_nothing():
    gate = AdmissionGate(1)

    async def scenario():
        assert gate.try_enter()
        assert not await gate.enter_within(0.0)  # no allowance: refused at once
        assert not await gate.enter_within(0.01)  # nobody leaves in time
        waiter = asyncio.create_task(gate.enter_within(30.0))
        await asyncio.sleep(0)
        gate.leave()  # a slot taken for it...
        waiter.cancel()  # ...which its caller abandoned before it resumed: given back
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(scenario())
    assert (gate.in_flight, gate.refused) == (0, 2)
    assert gate.try_enter()


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


def test_a_senders_float_stamp_reads_as_the_wait_since_it():
    """The router stamps a routed login with its wall clock as a float (no header text)."""
    assert waited_since(NOW - 0.25, NOW) == pytest.approx(0.25)
    assert waited_since(NOW + 0.5, NOW) == 0.0  # a little skew ahead: no wait
    assert waited_since(NOW - MAX_EDGE_WAIT_S - 1, NOW) is None
    assert waited_since(NOW + 3600, NOW) is None
