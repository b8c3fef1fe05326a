"""The login-day report's arithmetic: replica-seconds against a static peak layout, and
which seconds count as scaling up, down or steady."""

from __future__ import annotations

import pytest

from loadtest.autoscaling.report import Sample, cost, phase_at, phases

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_cost_integrates_running_replicas_against_the_peak_all_day():
    samples = [
        Sample(0.0, "members", 1, 1),
        Sample(10.0, "members", 3, 3),  # 3 replicas from 10 s to 20 s
        Sample(20.0, "members", 1, 1),
        Sample(0.0, "supervisor", 1, 1),
    ]
    report = cost(samples, {"members": 0.5, "supervisor": 0.1}, duration_s=40.0)
    members = report["deployments"]["members"]
    assert members["replica_s"] == pytest.approx(10 * 1 + 10 * 3 + 20 * 1)
    assert members["static_replica_s"] == pytest.approx(3 * 40)
    assert report["deployments"]["supervisor"]["replica_s"] == pytest.approx(40)
    assert report["totals"]["cpu_s"] == pytest.approx(60 * 0.5 + 40 * 0.1)
    assert report["ratio_replica_s"] == pytest.approx((60 + 40) / (120 + 40), abs=1e-3)


def test_seconds_are_classed_by_what_the_replicas_were_doing():
    samples = [
        Sample(0.0, "m", 1, 1),
        Sample(5.0, "m", 2, 1),  # a replica starting
        Sample(8.0, "m", 2, 2),
        Sample(12.0, "m", 1, 2),  # one draining
        Sample(14.0, "m", 1, 1),
    ]
    assert [phase_at(samples, t) for t in (1, 6, 9, 13, 15)] == [
        "steady",
        "scaling up",
        "steady",
        "scaling down",
        "steady",
    ]
    history = [
        {"t": float(t), "requests": 10.0 * t, "failures": 1.0 if t > 6 else 0.0, "p95_ms": 50.0}
        for t in range(0, 16)
    ]
    result = phases(samples, history)
    assert result["scaling up"]["failures"] == 1  # the failure counted at t=7
    assert result["scaling down"]["failures"] == 0
    assert sum(p["requests"] for p in result.values()) == 150
