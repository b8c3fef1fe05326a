"""Fallback answers reported as a rate-limited tally instead of one log line per login.

During an outage every login is a fallback: at 1,000 logins/s a line each would flood the
logs and cost the replica real time. The first fallback after a quiet spell is logged at
once (an operator sees the outage start); after that, one summary line per interval gives
the count per reason and one example detail.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable


class FallbackLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._example: dict[str, str] = {}
        self._window_started: float | None = None

    def record(self, reason: str, detail: str) -> None:
        now = self._clock()
        if self._window_started is None or now - self._window_started >= self._interval_s:
            self.flush(now)
            if self._window_started is None:
                # Quiet before: say so at once, then only summaries until it is quiet again.
                self._logger.warning("fallback answer (%s): %s", reason, detail)
                self._window_started = now
                return
        self._counts[reason] += 1
        self._example.setdefault(reason, detail)

    def flush(self, now: float | None = None) -> None:
        """Log the tally of the window that just ended (if any) and start a new one."""
        now = self._clock() if now is None else now
        if self._counts:
            seconds = now - (self._window_started or now)
            summary = ", ".join(f"{r}={n}" for r, n in sorted(self._counts.items()))
            examples = "; ".join(f"{r}: {d}" for r, d in sorted(self._example.items()))
            self._logger.warning(
                "%d fallback answers in the last %.0fs (%s); e.g. %s",
                sum(self._counts.values()),
                seconds,
                summary,
                examples,
            )
            self._window_started = now
        else:
            self._window_started = None  # a whole interval without fallbacks: quiet again
        self._counts.clear()
        self._example.clear()
