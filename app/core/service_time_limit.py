"""How many logins one replica takes on, and how many may wait for it, from its own timings.

A fixed bound is right on one host only. The same 16 logins in flight that a fast host
answers in 150 ms keep a host three times slower past half its budget, and a fixed edge
queue of 16 that drains in 100 ms there takes 300 ms or more here, so the logins at its end
wait out the queue's timeout only to be refused. So the replica measures what each login it
admitted took (admission to the answer's last byte) and derives both numbers from that:

- **the in-flight bound**, AIMD on latency: while logins are answered within the service
  share of the budget, a bound that was reached grows by one per bound's worth of logins;
  once the p90 of the logins answered since the last cut runs past it *and* the replica's
  event loop runs late (app.core.online.loop_lag: more than LAG_SHARE of that share), the bound is
  cut by a quarter, at most once per bound's worth of logins. Logins late while the loop
  idles wait on something else (a member past its deadline): fewer of them would shed
  nothing, only refuse; It stays within [1, ceiling]; the ceiling is
  `admission.max_in_flight`, which HAProxy also holds as each replica's maxconn;
- **the edge queue's room**, Little's law: this replica answers (logins it held) / (their
  mean service time) logins per second, both measured over the same recent logins, so the
  queue drains `room = rate x wait x QUEUE_FILL` logins within the wait the edge allows
  (its `timeout queue`). The logins held are counted as each one leaves, not taken to be
  the bound: a replica whose cores do the work holds one login at a time at low load and
  answers it in its CPU time, and the bound over that time claimed 16 times the rate it
  can drain. HAProxy then let hundreds queue at the start of a burst on a slowed host, and
  they were refused at the queue's timeout (run Q, 2026-11-27: refusal p99 670 ms against
  a floor of 133). HAProxy reads it from each answer's
  `X-Offers-Queue-Room` header (app.edge) and refuses a login at once when the queue holds
  that many per live replica. The room is measured over the logins answered within the
  last budget only: until a replica has `MIN_SAMPLES` of those it reports the least room,
  one login, and HAProxy counts one per replica too while it holds no room (it started,
  or reloaded) or one older than the queue's wait (app.edge). Admission opens the queue on
  evidence: a fixed first cap (`admission.edge_max_queued`, 128) let a burst right after a
  start queue on a host that could not drain it, refused at the queue's timeout (AI,
  2026-11-29: 75 logins at ≥ 500 ms). That cap is now only a ceiling.

The service share is the budget left after the edge queue's allowance: a login may wait up
to `queue_wait_s` and must still be answered within the budget. Nothing here is a host
constant; the two fractions below are shares of the login's own budget and queue wait.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable

# The queue is sized to drain in this share of the wait it allows: waits vary with the
# logins ahead (a burst's first ones are slower), and one that waited the whole allowance
# would only be refused.
QUEUE_FILL = 0.5
# The bound is cut to this share of itself when the recent service time runs past target.
DECREASE = 0.75
MIN_SAMPLES = 8
WINDOW = 64
# The loop is saturated when its median lag is this share of the login's service share
# (25 ms of 500 ms): a loop that keeps up wakes within a few ms, whatever the host.
LAG_SHARE = 0.05


class ServiceTimeLimit:
    def __init__(
        self,
        *,
        ceiling: int,
        budget_s: float,
        queue_wait_s: float,
        loop_lag_s: Callable[[], float],
        window: int = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ceiling < 1:
            raise ValueError(f"ceiling must be at least 1, got {ceiling}")
        if window < MIN_SAMPLES:
            raise ValueError(f"window must hold at least {MIN_SAMPLES} samples, got {window}")
        self.ceiling = ceiling
        self._loop_lag_s = loop_lag_s
        self._limit = float(ceiling)
        # At least two rounds of the ceiling: a cut needs a bound's worth of fresh samples.
        self._samples: deque[float] = deque(maxlen=max(window, 2 * ceiling))
        # The logins held as each of those left (itself included): Little's law's L.
        self._held: deque[int] = deque(maxlen=self._samples.maxlen)
        # When each of those left: the room counts only the recent ones.
        self._at: deque[float] = deque(maxlen=self._samples.maxlen)
        self._clock = clock
        self._since_cut = 0
        # Logins still in flight at the last cut: they were let in under the old bound, so
        # their answers do not judge the new one.
        self._admitted_before_cut = 0
        self.retarget(budget_s, queue_wait_s)

    def retarget(self, budget_s: float, queue_wait_s: float) -> None:
        """A live budget change (the supervisor's knobs)."""
        if budget_s <= 0 or not 0 <= queue_wait_s < budget_s:
            raise ValueError(f"need 0 <= queue wait ({queue_wait_s}) < budget ({budget_s})")
        self.budget_s = budget_s
        self.queue_wait_s = queue_wait_s
        # What a login may take here: the budget less the longest the edge lets it wait.
        self.target_s = budget_s - queue_wait_s

    @property
    def bound(self) -> int:
        return max(1, min(self.ceiling, math.floor(self._limit)))

    def record(self, service_s: float, in_flight: int) -> None:
        """One admitted login answered after `service_s`; `in_flight` were held as it
        left (itself included): the bound was binding if that reached it."""
        service_s = max(service_s, 0.0)
        self._samples.append(service_s)
        self._held.append(max(in_flight, 1))
        self._at.append(self._clock())
        if self._admitted_before_cut > 0:
            self._admitted_before_cut -= 1
        else:
            self._since_cut += 1
        # One cut per bound's worth of logins answered since the last (about one round of
        # the logins it let in), judged on those logins only: the ones before it ran under
        # the old bound. And only while the loop runs late (the module docstring).
        fresh = min(self._since_cut, len(self._samples))
        if (
            fresh >= max(MIN_SAMPLES, self.bound)
            and self.p90_s(fresh) > self.target_s
            and self.saturated()
        ):
            self._limit = max(1.0, self._limit * DECREASE)
            self._since_cut = 0
            self._admitted_before_cut = max(0, in_flight - 1)  # the others still held
        elif service_s <= self.target_s and in_flight >= self.bound:
            self._limit = min(float(self.ceiling), self._limit + 1.0 / self._limit)

    def saturated(self) -> bool:
        return self._loop_lag_s() > LAG_SHARE * self.target_s

    def p90_s(self, last: int | None = None) -> float:
        """The 90th percentile of the last `last` service times (all of the window's)."""
        recent = list(self._samples)[-last:] if last else list(self._samples)
        if not recent:
            return 0.0
        ordered = sorted(recent)
        return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]

    def queue_room(self) -> int:
        """Logins that may wait at the edge for this replica: 1 while it has not answered
        MIN_SAMPLES logins within the last budget (the least room it reports).

        Only those: a login older than a budget ended before any login now waiting arrived,
        and it may describe another host. A host slowed while idle (neighbours started,
        throttled) would otherwise answer a burst's first logins with the room it drained
        before (the window holds 64 logins, mostly old ones), and HAProxy let the burst
        queue on it, to be refused at the queue's timeout (AH, 2026-11-29: 511 ms against a
        floor of 225)."""
        since = self._clock() - self.budget_s
        logins = zip(self._samples, self._held, self._at, strict=True)
        recent = [(s, h) for s, h, at in logins if at >= since]
        if len(recent) < MIN_SAMPLES:
            return 1
        mean_s = statistics.fmean(s for s, _ in recent)
        if mean_s <= 0:
            return 1
        rate = statistics.fmean(h for _, h in recent) / mean_s
        return max(1, math.floor(rate * self.queue_wait_s * QUEUE_FILL))
