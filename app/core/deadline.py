"""A request's time budget on the monotonic clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Deadline:
    started: float
    budget_s: float
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)

    @classmethod
    def start(cls, budget_ms: float, clock: Callable[[], float] = time.perf_counter) -> Deadline:
        return cls(clock(), budget_ms / 1000.0, clock)

    def remaining_s(self) -> float:
        """Seconds left, never negative."""
        return max(self.budget_s - (self.clock() - self.started), 0.0)

    def elapsed_ms(self) -> float:
        return (self.clock() - self.started) * 1000.0
