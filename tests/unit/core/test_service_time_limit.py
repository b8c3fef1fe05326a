"""The adaptive admission's limits follow the service time a replica measures: a slower host
gets a lower in-flight bound and a shallower edge queue, a faster one gets them back, and
neither ever leaves [1, ceiling]."""

from __future__ import annotations

import pytest

from app.core.admission import AdmissionGate
from app.core.load_meter import LoadMeter
from app.core.service_time_limit import MIN_SAMPLES, QUEUE_FILL, ServiceTimeLimit

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

BUDGET_S = 1.0
QUEUE_WAIT_S = 0.5  # the default edge queue timeout: half the budget
CEILING = 16


class Loop:
    """The replica's loop lag, as the test sets it: 0.1 s is a saturated loop."""

    lag_s = 0.1

    def __call__(self) -> float:
        return self.lag_s


def limit(loop: Loop | None = None) -> ServiceTimeLimit:
    return ServiceTimeLimit(
        ceiling=CEILING, budget_s=BUDGET_S, queue_wait_s=QUEUE_WAIT_S, loop_lag_s=loop or Loop()
    )


def run(lim: ServiceTimeLimit, logins: int, service_s: float) -> None:
    """`logins` answered after `service_s` each, with the bound full (a saturated replica)."""
    for _ in range(logins):
        lim.record(service_s, in_flight=lim.bound)


def test_before_it_measured_the_bound_is_the_ceiling_and_the_edge_gets_the_least_room():
    lim = limit()
    assert lim.queue_room() == 1
    for _ in range(MIN_SAMPLES - 1):
        lim.record(0.001, in_flight=1)  # however fast: not yet evidence
    assert lim.bound == CEILING
    assert lim.queue_room() == 1
    lim.record(0.001, in_flight=1)
    assert lim.queue_room() == int(1 / 0.001 * QUEUE_WAIT_S * QUEUE_FILL)


def shared_cpu(lim: ServiceTimeLimit, rounds: int, cpu_s: float) -> None:
    """A saturated CPU-bound replica: the logins it holds share its core, so each takes its
    own CPU time times the bound (processor sharing)."""
    for _ in range(rounds):
        run(lim, lim.bound, cpu_s * lim.bound)


def test_a_host_that_got_slower_gets_a_lower_bound_and_a_shallower_queue():
    lim = limit()
    shared_cpu(lim, 50, 0.03)  # 16 x 30 ms = 0.48 s: within 1 s less the queue's 0.5 s
    fast_room = lim.queue_room()
    assert lim.bound == CEILING
    assert fast_room == int(CEILING / 0.48 * QUEUE_WAIT_S * QUEUE_FILL)

    # The same replica on a host 3x slower: 16 x 90 ms = 1.44 s, late. The bound falls to
    # where the logins held are answered within 0.5 s (5 x 90 ms) and hovers there.
    shared_cpu(lim, 200, 0.09)
    assert 3 <= lim.bound <= 6
    room = lim.queue_room()
    assert room is not None and room < fast_room

    shared_cpu(lim, 400, 0.03)  # the host is back
    assert lim.bound == CEILING


def test_a_slower_service_time_at_the_same_bound_halves_the_room_it_doubles():
    a, b = limit(), limit()
    run(a, 64, 0.1)
    run(b, 64, 0.2)
    assert a.bound == b.bound == CEILING
    assert b.queue_room() == a.queue_room() // 2


def test_the_room_is_the_rate_the_replica_drained_not_the_bound_over_an_idle_service_time():
    """At low load a CPU-bound replica holds one login at a time and answers it in its CPU
    time (10 ms): it drains 100 logins/s, not the bound's 16 / 10 ms. The room is what
    that rate drains in the queue's fill share of its wait; claimed from the bound, it let
    hundreds queue at a burst's start on a slowed host, refused at the queue's timeout."""
    lim = limit()
    for _ in range(64):
        lim.record(0.010, in_flight=1)
    assert lim.bound == CEILING
    assert lim.queue_room() == int(1 / 0.010 * QUEUE_WAIT_S * QUEUE_FILL)  # 25, not 400
    # Saturated on the same core (processor sharing: 16 held, 160 ms each), the rate and
    # so the room are the same: what the core drains.
    for _ in range(64):
        lim.record(0.010 * CEILING, in_flight=CEILING)
    assert lim.queue_room() == int(1 / 0.010 * QUEUE_WAIT_S * QUEUE_FILL)


def test_the_bound_comes_back_when_the_host_does_and_stops_at_the_ceiling():
    lim = limit()
    run(lim, 400, 0.9)  # far past the 0.5 s target
    assert lim.bound == 1
    assert lim.queue_room() >= 1  # never 0: a login with a free slot is never refused
    run(lim, 2_000, 0.05)
    assert lim.bound == CEILING


def test_a_bound_that_was_not_reached_does_not_grow():
    lim = limit()
    while lim.bound == CEILING:
        lim.record(0.9, in_flight=CEILING)
    low = lim.bound
    for _ in range(500):
        lim.record(0.05, in_flight=1)  # on time, but the replica is not full
    assert lim.bound == low


def test_one_cut_per_round_of_logins_let_in_after_the_last():
    lim = limit()
    run(lim, 64, 0.1)
    while lim.bound == CEILING:
        lim.record(0.9, in_flight=CEILING)
    assert lim.bound == int(CEILING * 0.75)  # one cut, by a quarter
    # The 15 others held at the cut were let in under the old bound: they do not judge it.
    for _ in range(CEILING - 1):
        lim.record(0.9, in_flight=CEILING)
    assert lim.bound == int(CEILING * 0.75)
    # A round of logins let in under the new bound, late too: the next cut.
    for _ in range(lim.bound - 1):
        lim.record(0.9, in_flight=lim.bound)
    assert lim.bound == int(CEILING * 0.75)
    lim.record(0.9, in_flight=lim.bound)
    assert lim.bound == int(CEILING * 0.75 * 0.75)


def test_a_ceiling_past_the_window_can_still_be_cut():
    lim = ServiceTimeLimit(ceiling=200, budget_s=1.0, queue_wait_s=0.5, loop_lag_s=Loop())
    run(lim, 400, 0.9)
    assert lim.bound < 200


def test_a_live_budget_moves_the_target():
    lim = limit()
    run(lim, 64, 0.4)
    assert lim.bound == CEILING  # 0.4 s is within 1 s - 0.5 s
    lim.retarget(budget_s=0.6, queue_wait_s=0.3)
    run(lim, CEILING, 0.4)
    assert lim.bound < CEILING
    with pytest.raises(ValueError):
        lim.retarget(budget_s=0.5, queue_wait_s=0.5)


def test_the_gate_holds_the_measured_bound_and_autoscales_on_it():
    meter = LoadMeter(CEILING)
    gate = AdmissionGate(CEILING, load=meter, limit=limit())
    for _ in range(30):  # rounds of a full bound, each login answered late
        bound = gate.max_in_flight
        assert [gate.try_enter() for _ in range(bound + 1)] == [True] * bound + [False]
        for _ in range(bound):
            gate.leave(0.9)
    assert gate.max_in_flight < CEILING
    # Its utilization is read over the bound it holds now, not the ceiling: a replica the
    # host holds to 2 logins is full at 2.
    assert meter.capacity == gate.max_in_flight
    with pytest.raises(ValueError):
        AdmissionGate(CEILING - 1, limit=limit())


def test_the_loop_lag_is_the_median_of_the_last_seconds_ticks():
    import asyncio
    import time

    from app.core.online.loop_lag import TICKS, LoopLag

    lag = LoopLag()
    assert lag.recent_s() == 0.0
    for value in [0.001] * (TICKS - 5) + [0.5] * 5:  # a few slow ticks: not saturated
        lag.record(value)
    assert lag.recent_s() == 0.001
    for value in [0.2] * TICKS:
        lag.record(value)
    assert lag.recent_s() == 0.2

    async def blocked() -> float:
        ticker = LoopLag(interval_s=0.01)
        task = asyncio.create_task(ticker.run())
        await asyncio.sleep(0)
        for _ in range(20):
            time.sleep(0.03)  # noqa: ASYNC251 - the loop held 30 ms: each 10 ms tick wakes late
            await asyncio.sleep(0)
        task.cancel()
        return ticker.recent_s()

    assert asyncio.run(blocked()) > 0.01


def test_logins_late_while_the_loop_idles_do_not_cut_the_bound():
    """A member past its deadline makes every login late while the replica's loop idles,
    waiting: a lower bound would shed nothing, only refuse."""
    loop = Loop()
    loop.lag_s = 0.002
    lim = limit(loop)
    run(lim, 500, 0.95)
    assert lim.bound == CEILING
    loop.lag_s = 0.1  # the same lateness with the loop behind: the replica is the limit
    run(lim, CEILING, 0.95)
    assert lim.bound < CEILING


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_room_counts_only_the_logins_answered_within_the_last_budget():
    """A replica that drained fast, then served nothing while its host slowed: it reports the
    least room until it has answered MIN_SAMPLES logins on the slowed host, and then the room
    of those alone, not of a window still full of the fast ones."""
    clock = Clock()
    lim = ServiceTimeLimit(
        ceiling=CEILING, budget_s=BUDGET_S, queue_wait_s=QUEUE_WAIT_S, loop_lag_s=Loop(),
        clock=clock,
    )  # fmt: skip
    for _ in range(56):
        lim.record(0.010, in_flight=1)
    assert lim.queue_room() == int(1 / 0.010 * QUEUE_WAIT_S * QUEUE_FILL)

    clock.now += BUDGET_S + 0.001  # idle for a budget
    assert lim.queue_room() == 1
    for _ in range(MIN_SAMPLES - 1):
        lim.record(0.040, in_flight=1)  # the host 4x slower
    assert lim.queue_room() == 1
    lim.record(0.040, in_flight=1)
    assert lim.queue_room() == int(1 / 0.040 * QUEUE_WAIT_S * QUEUE_FILL)
