"""How late this replica's event loop runs: the signal that its own CPU is the limit.

A login can be late for two reasons. Either the replica cannot keep up (its loop, or the
core under it, is saturated: every callback, this ticker's included, runs late), or it waits
on something else (a member past its deadline, a slow DynamoDB) while its loop idles. Only
the first is shed by admitting fewer logins; the second would only turn waits that cost the
replica nothing into refusals. A ticker that sleeps `interval_s` and records how much later
it woke tells the two apart (app.core.service_time_limit).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from collections.abc import Callable

INTERVAL_S = 0.05
TICKS = 20  # the median of the last second's ticks


class LoopLag:
    def __init__(
        self, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lags: deque[float] = deque(maxlen=TICKS)

    def record(self, lag_s: float) -> None:
        self._lags.append(max(lag_s, 0.0))

    def recent_s(self) -> float:
        """The median lag of the last second's ticks (0 before the first)."""
        return statistics.median(self._lags) if self._lags else 0.0

    async def run(self) -> None:
        """Ticks until cancelled (the replica's lifetime)."""
        while True:
            started = self._clock()
            await asyncio.sleep(self.interval_s)
            self.record(self._clock() - started - self.interval_s)
