"""How much of its capacity a replica used: the load signal its deployment scales on.

Serve's default autoscaling counts ongoing requests per replica. The supervisor coalesces
logins, so a member replica sees one request at a time however heavy the traffic: that count
stays flat while the member's batches grow. What grows with the traffic is the time the
member spends scoring. So each replica measures its own *utilization*: the time-average of
the work it holds, over the last window, as a share of what it can hold at once.

- a member replica holds one predict at a time (one scoring thread): utilization is the
  share of wall time spent scoring, 0..1;
- a supervisor or router replica holds up to `admission.max_in_flight` logins (the
  router's bound is enforced at the edge): utilization is the mean number in flight over
  that bound.

The meter integrates a level (work held) over time with an injectable clock; its samples
are what `record_autoscaling_stats` hands to Serve, and app.core.planning.replica_scaling turns the
deployment's samples into a replica count.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class LoadMeter:
    """Time-integral of a level (work in progress), read as mean level / capacity."""

    def __init__(
        self,
        capacity: float,
        *,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity <= 0 or window_s <= 0:
            raise ValueError("capacity and window_s must be positive")
        self.capacity = capacity
        self._window_s = window_s
        self._clock = clock
        now = clock()
        self._level = 0.0
        self._since = now  # when the level last changed
        self._area = 0.0  # integral of the level up to _since
        # (time, area at that time): the window's left edge is found in here.
        self._marks: deque[tuple[float, float]] = deque([(now, 0.0)])

    def enter(self, amount: float = 1.0) -> None:
        self._advance()
        self._level += amount

    def exit(self, amount: float = 1.0) -> None:
        self._advance()
        self._level = max(0.0, self._level - amount)

    @property
    def level(self) -> float:
        return self._level

    def utilization(self) -> float:
        """Mean level over the last window (or since start, if shorter), / capacity."""
        now = self._advance()
        start = now - self._window_s
        while len(self._marks) > 1 and self._marks[1][0] <= start:
            self._marks.popleft()
        t0, area0 = self._marks[0]
        if t0 < start:  # interpolate: the level was constant between two marks
            t1, area1 = self._marks[1] if len(self._marks) > 1 else (now, self._area)
            area0 += (area1 - area0) * (start - t0) / (t1 - t0) if t1 > t0 else 0.0
            t0 = start
        elapsed = now - t0
        if elapsed <= 0:
            return self._level / self.capacity
        return (self._area - area0) / elapsed / self.capacity

    def _advance(self) -> float:
        now = self._clock()
        if now > self._since:
            self._area += self._level * (now - self._since)
            self._since = now
            self._marks.append((now, self._area))
            # Bounded memory: marks older than two windows are never read again.
            while len(self._marks) > 2 and self._marks[1][0] <= now - 2 * self._window_s:
                self._marks.popleft()
        return now
