"""Recurring warnings logged as a tally per interval instead of one line per event.

During an outage every login is a fallback, and a dead member fails every fan-out: at 1,000
logins/s a line each would flood the logs and cost the replica real time. The first event
after a quiet spell is logged at once (an operator sees the trouble start); after that, one
line per interval gives the count per kind and one example detail. `tick()` (called on every
request, cheap) closes a finished interval even when no new event comes, so the tally of an
outage that has ended is not held back; `flush()` writes what is pending (shutdown).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable


class TallyLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._what = what  # e.g. "fallback answers"
        self._interval_s = interval_s
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._example: dict[str, str] = {}
        self._window_started: float | None = None  # None: quiet, the next event logs at once

    def record(self, kind: str, detail: str) -> None:
        now = self._clock()
        self._roll(now)
        if self._window_started is None:
            self._logger.warning("%s (%s): %s", self._what, kind, detail)
            self._window_started = now
            return
        self._counts[kind] += 1
        self._example.setdefault(kind, detail)

    def tick(self) -> None:
        """Close the current interval if it is over (logging its tally, if any)."""
        if self._window_started is not None:
            self._roll(self._clock())

    def flush(self) -> None:
        """Log whatever is pending now, whether or not the interval is over."""
        if self._window_started is not None:
            self._close_window(self._clock())

    def _roll(self, now: float) -> None:
        if self._window_started is not None and now - self._window_started >= self._interval_s:
            self._close_window(now)

    def _close_window(self, now: float) -> None:
        assert self._window_started is not None
        if not self._counts:
            self._window_started = None  # a whole interval without events: quiet again
            return
        summary = ", ".join(f"{k}={n}" for k, n in sorted(self._counts.items()))
        examples = "; ".join(f"{k}: {d}" for k, d in sorted(self._example.items()))
        self._logger.warning(
            "%d more %s in the last %.0fs (%s); e.g. %s",
            sum(self._counts.values()),
            self._what,
            now - self._window_started,
            summary,
            examples,
        )
        self._counts.clear()
        self._example.clear()
        self._window_started = now
