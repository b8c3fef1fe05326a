"""The load signal (LoadMeter) and the replica count it asks for (desired_replicas), on a
controlled clock."""

from __future__ import annotations

import pytest

from app.core.load_meter import LoadMeter
from app.core.replica_scaling import desired_replicas
from tests.support import ManualClock

pytestmark = pytest.mark.unit


def test_a_replica_busy_a_quarter_of_the_window_is_25_percent_utilized():
    clock = ManualClock(1000.0)
    meter = LoadMeter(1.0, window_s=10.0, clock=clock)
    for _ in range(5):  # 0.5 s of every 2 s scoring
        meter.enter()
        clock.now += 0.5
        meter.exit()
        clock.now += 1.5
    assert meter.utilization() == pytest.approx(0.25)


def test_only_the_last_window_counts_and_work_in_progress_counts_now():
    clock = ManualClock(1000.0)
    meter = LoadMeter(1.0, window_s=10.0, clock=clock)
    meter.enter()
    clock.now += 30.0  # busy for 30 s...
    meter.exit()
    clock.now += 5.0  # ...then idle for 5: the window holds 5 busy and 5 idle seconds
    assert meter.utilization() == pytest.approx(0.5)
    clock.now += 10.0
    assert meter.utilization() == 0.0  # night: nothing in the window
    meter.enter()
    clock.now += 2.5  # a predict still running counts for the time it has run
    assert meter.utilization() == pytest.approx(0.25)


def test_the_supervisors_level_is_logins_in_flight_over_its_admission_bound():
    clock = ManualClock(1000.0)
    meter = LoadMeter(16.0, window_s=10.0, clock=clock)
    meter.enter(8)
    clock.now += 10.0
    assert meter.utilization() == pytest.approx(0.5)
    meter.exit(8)
    meter.exit(3)  # more exits than entries never go below zero
    assert meter.level == 0.0


def test_a_young_meter_averages_over_its_life_so_far():
    clock = ManualClock(1000.0)
    meter = LoadMeter(1.0, window_s=10.0, clock=clock)
    meter.enter()
    clock.now += 2.0
    assert meter.utilization() == pytest.approx(1.0)


def test_marks_stay_bounded_under_many_short_predicts():
    clock = ManualClock(1000.0)
    meter = LoadMeter(1.0, window_s=1.0, clock=clock)
    for _ in range(10_000):
        meter.enter()
        clock.now += 0.001
        meter.exit()
        clock.now += 0.003
    assert meter.utilization() == pytest.approx(0.25, rel=0.01)
    assert len(meter._marks) <= 2 * 2 * 1.0 / 0.001 + 2  # two windows of marks at most


def test_rising_load_asks_for_more_replicas_and_falling_load_for_fewer():
    # Two replicas at 90%: the work is 1.8 replicas' worth; at a 60% target that is 3.
    assert desired_replicas([0.9, 0.9], 0.6) == pytest.approx(3.0)
    # Three replicas at 10% at night: 0.5 of one replica; Serve clamps to min_replicas.
    assert desired_replicas([0.1, 0.1, 0.1], 0.6) == pytest.approx(0.5)
    # A replica that just started and has not reported counts as idle (not in the list).
    assert desired_replicas([0.9], 0.6) == pytest.approx(1.5)
    assert desired_replicas([], 0.6) is None
    with pytest.raises(ValueError):
        desired_replicas([0.5], 0.0)


def test_the_policy_reads_only_running_replicas_and_holds_before_any_report():
    from types import SimpleNamespace

    from app.serving.autoscaling import UtilizationPolicy

    policy = UtilizationPolicy(target_utilization=0.5)
    ctx = SimpleNamespace(
        aggregated_metrics={"utilization": {"r1": 0.9, "r2": 0.6, "gone": 1.0}},
        running_replicas=["r1", "r2"],
        target_num_replicas=2,
    )
    assert policy(ctx) == (pytest.approx(3.0), {})
    cheap = SimpleNamespace(
        aggregated_metrics={"utilization": {"r1": 0.1, "r2": 0.1}},
        running_replicas=["r1", "r2"],
        target_num_replicas=2,
    )
    # Same traffic, cheaper member: fewer replicas (Serve clamps to min_replicas).
    assert policy(cheap)[0] < policy(ctx)[0]
    fresh = SimpleNamespace(aggregated_metrics=None, running_replicas=["r1"], target_num_replicas=1)
    assert policy(fresh) == (1, {})
