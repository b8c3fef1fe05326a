import pytest

from app.core.offline.pacing import ReadPacer
from tests.support import ManualClock

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Sleeper:
    def __init__(self, clock):
        self.clock, self.pauses = clock, []

    def __call__(self, seconds):
        self.pauses.append(seconds)
        self.clock.now += seconds


def test_reads_within_the_budget_never_wait():
    clock = ManualClock()
    sleep = Sleeper(clock)
    pacer = ReadPacer(100, clock=clock, sleep=sleep)
    for _ in range(10):
        pacer.wait()
        pacer.spend(10)  # 100 items in the first second: the saved-up second
        clock.now += 0.1
    assert sleep.pauses == []


def test_a_sustained_reader_is_held_to_the_rate():
    clock = ManualClock()
    sleep = Sleeper(clock)
    pacer = ReadPacer(100, clock=clock, sleep=sleep)
    items = 0
    for _ in range(50):
        pacer.wait()
        pacer.spend(50)  # pages arrive instantly: only the pacer slows the reader
        items += 50
    # 2,500 items at 100/s with one second saved up: at least 24 s of pauses.
    assert clock.now == pytest.approx((items - 100 - 50) / 100, abs=0.01)
    assert items / clock.now <= 100 * 1.07


def test_idle_time_does_not_earn_a_burst_beyond_one_second():
    clock = ManualClock()
    sleep = Sleeper(clock)
    pacer = ReadPacer(100, clock=clock, sleep=sleep)
    clock.now += 3600
    pacer.wait()
    pacer.spend(300)
    pacer.wait()
    assert sleep.pauses == [pytest.approx(2.0)]


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        ReadPacer(0)
