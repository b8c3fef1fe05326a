"""The load signal (LoadMeter) and the replica count it asks for (desired_replicas), on a
controlled clock."""

from __future__ import annotations

import pytest

from app.core.load_meter import LoadMeter
from app.core.planning.replica_scaling import desired_replicas
from tests.support import ManualClock

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def metered(bound: float = 1.0, window_s: float = 10.0) -> tuple[ManualClock, LoadMeter]:
    """A meter of `bound` and `window_s` on a clock the test moves."""
    clock = ManualClock(1000.0)
    return clock, LoadMeter(bound, window_s=window_s, clock=clock)


def test_a_replica_busy_a_quarter_of_the_window_is_25_percent_utilized():
    clock, meter = metered()
    for _ in range(5):  # 0.5 s of every 2 s scoring
        meter.enter()
        clock.now += 0.5
        meter.exit()
        clock.now += 1.5
    assert meter.utilization() == pytest.approx(0.25)


def test_only_the_last_window_counts_and_work_in_progress_counts_now():
    clock, meter = metered()
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
    clock, meter = metered(bound=16.0)
    meter.enter(8)
    clock.now += 10.0
    assert meter.utilization() == pytest.approx(0.5)
    meter.exit(8)
    meter.exit(3)  # more exits than entries never go below zero
    assert meter.level == 0.0


def test_a_young_meter_averages_over_its_life_so_far():
    clock, meter = metered()
    meter.enter()
    clock.now += 2.0
    assert meter.utilization() == pytest.approx(1.0)


def test_marks_stay_bounded_under_many_short_predicts():
    clock, meter = metered(window_s=1.0)
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


def test_no_replica_is_added_while_no_host_has_idle_cpu():
    from app.core.planning.replica_scaling import capped_by_idle_cpu

    # More wanted, a host has 0.8 cores idle: granted.
    assert capped_by_idle_cpu(3.0, 2, idle_cpus=0.8, min_idle_cpus=0.5) == 3.0
    # More wanted, every host busy: hold at the current count.
    assert capped_by_idle_cpu(3.0, 2, idle_cpus=0.2, min_idle_cpus=0.5) == 2
    # Fewer is always allowed, and unknown idle CPU or no cap never holds a decision back.
    assert capped_by_idle_cpu(1.0, 2, idle_cpus=0.0, min_idle_cpus=0.5) == 1.0
    assert capped_by_idle_cpu(3.0, 2, idle_cpus=None, min_idle_cpus=0.5) == 3.0
    assert capped_by_idle_cpu(3.0, 2, idle_cpus=0.0, min_idle_cpus=None) == 3.0


def test_the_policy_caps_by_the_most_idle_running_replicas_host():
    from types import SimpleNamespace

    from app.serving.autoscaling import UtilizationPolicy

    policy = UtilizationPolicy(target_utilization=0.5, min_idle_cpus=0.5)
    busy = SimpleNamespace(
        aggregated_metrics={
            "utilization": {"r1": 0.9, "r2": 0.9},
            # A stopped replica's report of an idle host does not count.
            "idle_cpus": {"r1": 0.1, "r2": 0.3, "gone": 1.5},
        },
        running_replicas=["r1", "r2"],
        target_num_replicas=2,
    )
    assert policy(busy) == (2, {})
    room = SimpleNamespace(
        aggregated_metrics={"utilization": {"r1": 0.9, "r2": 0.9}, "idle_cpus": {"r2": 0.7}},
        running_replicas=["r1", "r2"],
        target_num_replicas=2,
    )
    assert policy(room) == (pytest.approx(3.6), {})


def test_idle_cpu_is_read_from_the_kernels_counters(tmp_path):
    from app.adapters.host_cpu import IdleCpu

    stat = tmp_path / "stat"
    #                user nice system idle iowait irq softirq steal
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3\n")
    idle = IdleCpu(stat, cpus=2)
    stat.write_text("cpu  250 0 150 900 100 0 0 0 0 0\n")  # +200 busy, +200 idle/iowait
    assert idle.cores() == pytest.approx(1.0)
    assert idle.cores() is None  # no time passed between the reads
    assert IdleCpu(tmp_path / "missing").cores() is None
