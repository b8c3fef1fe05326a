"""A read budget for the batch Scan: a token bucket the reader pays into after each page.

The feature table serves the online path's logins. A batch run that scanned as fast as it
could would take the table's capacity from them (throttled GetItems become fallbacks), so
every Scan segment reads at most its share of a configured budget, in items or read units
per second. A page is charged after it arrives (its cost is only known then); the next page
waits until the debt is paid off.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ReadPacer:
    def __init__(
        self,
        rate_per_s: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be positive, got {rate_per_s}")
        self.rate_per_s = rate_per_s
        # At most one second of budget saved up: an idle reader does not earn a burst.
        self.burst = rate_per_s if burst is None else burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._at = clock()
        self.waited_s = 0.0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now

    def wait(self) -> None:
        """Block until the budget spent so far is paid off."""
        self._refill()
        if self._tokens < 0:
            pause = -self._tokens / self.rate_per_s
            self._sleep(pause)
            self.waited_s += pause
            self._refill()

    def spend(self, cost: float) -> None:
        """Charge what a page cost (items scanned or read units consumed)."""
        self._refill()
        self._tokens -= cost
