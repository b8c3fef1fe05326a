"""measure_costs separates a member's fixed cost per call from its cost per row, and noise
on a busy host (which only ever adds time) does not move the figure."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.adapters import predict_cost

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class FakeModel:
    """Advances the clock by call_ms + row_ms per row, plus noise on some calls."""

    def __init__(self, name: str, clock: Clock, call_ms: float, row_ms: float, noise_ms):
        self.name, self._clock = name, clock
        self._call_ms, self._row_ms = call_ms, row_ms
        self._noise = noise_ms

    def score(self, matrix: np.ndarray) -> np.ndarray:
        ms = self._call_ms + self._row_ms * matrix.shape[0] + next(self._noise)
        self._clock.now_s += ms / 1000.0
        return np.zeros(matrix.shape[0])


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(predict_cost.time, "perf_counter", c)
    return c


def test_call_and_row_costs_recovered_when_most_calls_are_slowed_by_noise(clock):
    # Two calls in three land in a noisy moment (+4 ms, +9 ms): the median would be off.
    noisy = FakeModel("et", clock, 3.0, 0.02, itertools.cycle([4.0, 0.0, 9.0]))
    quiet = FakeModel("xgb", clock, 0.3, 0.001, itertools.repeat(0.0))
    login = np.zeros((10, 4), dtype=np.float32)

    costs = {c.name: c for c in predict_cost.measure_costs([noisy, quiet], login)}

    assert costs["et"].call_ms == pytest.approx(3.0)
    assert costs["et"].row_ms == pytest.approx(0.02)
    assert costs["xgb"].call_ms == pytest.approx(0.3)
    assert costs["xgb"].row_ms == pytest.approx(0.001)


def test_a_member_with_no_fixed_cost_is_all_per_row(clock):
    rows_only = FakeModel("lin", clock, 0.0, 0.05, itertools.repeat(0.0))
    (cost,) = predict_cost.measure_costs([rows_only], np.zeros((10, 4), dtype=np.float32))
    assert cost.call_ms == pytest.approx(0.0, abs=1e-9)
    assert cost.row_ms == pytest.approx(0.05)
