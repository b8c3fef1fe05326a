"""Admission: how many logins one supervisor replica takes on at once, and when one started.

Every accepted login is answered within its budget (the deadline cuts the feature read and
the fan-out short, and the answer falls back), but only while the replica's event loop keeps
up. Logins past the point where it cannot only add loop lag and queueing that no budget
sees. The gate refuses them in microseconds, with a retryable 503, so the accepted ones stay
on time and the caller learns at once that it should back off. A login a game's router sends
may instead wait a bounded time for a slot here (`enter_within`): it has no queue in front of
this replica, and its refusal would cost two event loops' trips.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.load_meter import LoadMeter
from app.core.service_time_limit import ServiceTimeLimit
from app.core.slot_waiters import SlotWaiters

# The body of every refusal for load, whoever gives it: a supervisor's gate, a version
# answering the router, or HAProxy's queue (app.edge). A caller sees one refusal, one meaning.
OVERLOADED_DETAIL = (
    "overloaded: the service holds as many logins as it can answer in time; retry after the "
    "Retry-After header's seconds"
)

# On every answer of an ingress replica with an adaptive bound: how many logins may wait at
# the edge for it (ServiceTimeLimit.queue_room). HAProxy keeps the latest per application
# and refuses at once past it (app.edge.haproxy_config).
QUEUE_ROOM_HEADER = "X-Offers-Queue-Room"

# A front proxy's arrival stamp this far in the past (or future) is clock skew or a bad
# header, not queueing; it is ignored rather than trusted.
MAX_EDGE_WAIT_S = 60.0


class AdmissionGate:
    """A bound on the logins in flight in one replica (one event loop: no lock needed).

    With a `limit`, the bound follows the service time the replica measures (at most
    `max_in_flight`; app.core.service_time_limit); without, it is `max_in_flight`."""

    def __init__(
        self,
        max_in_flight: int,
        load: LoadMeter | None = None,
        limit: ServiceTimeLimit | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        if limit is not None and limit.ceiling != max_in_flight:
            raise ValueError(f"limit's ceiling {limit.ceiling} is not max_in_flight")
        self._ceiling = max_in_flight
        self.limit = limit
        self.in_flight = 0
        self.admitted = 0
        self.refused = 0
        # The replica's load signal (autoscaling): logins held, over the bound.
        self._load = load
        self._waiting = SlotWaiters()

    @property
    def max_in_flight(self) -> int:
        """The bound now."""
        return self.limit.bound if self.limit is not None else self._ceiling

    def queue_room(self) -> int | None:
        """Logins that may wait at the edge for this replica (None: a fixed bound reports
        none, and HAProxy's static cap holds the queue)."""
        return self.limit.queue_room() if self.limit is not None else None

    def try_enter(self) -> bool:
        """Admit a login at once, or refuse it (HTTP logins wait in HAProxy's queue instead,
        where refusing costs no Python). It cannot pass a waiting routed login: logins only
        wait while every slot is taken, and a freed slot is handed to the oldest of them."""
        if self.in_flight >= self.max_in_flight:
            self.refused += 1
            return False
        self._take()
        return True

    async def enter_within(self, wait_s: float) -> bool:
        """Admit a login at once if there is room, else let it wait up to `wait_s` for a
        slot to free here, first come first served (a login a game's router sends: it has
        no queue in front of this replica, and Serve's handle can send it to a full replica
        while another has room; app.core.routing.version_load)."""
        if self.in_flight < self.max_in_flight and not self._waiting:
            self._take()
            return True
        if await self._waiting.wait(wait_s, give_back=self.leave):
            return True
        self.refused += 1
        return False

    def _take(self) -> None:
        self.in_flight += 1
        self.admitted += 1
        if self._load is not None:
            self._load.enter()

    def alone(self) -> bool:
        """Whether at most one login is in flight here: the caller, if it was admitted. No
        other login could then share its work (the coalescer's lone-login path)."""
        return self.in_flight <= 1

    def leave(self, service_s: float | None = None) -> None:
        """A login admitted here is answered (after `service_s`, when the caller timed it:
        the adaptive bound learns from it) or abandoned."""
        if self.in_flight <= 0:
            raise RuntimeError("AdmissionGate.leave() without a login it admitted")
        if self.limit is not None and service_s is not None:
            self.limit.record(service_s, self.in_flight)
        self.in_flight -= 1
        if self._load is not None:
            # Utilization is over the bound now: a replica the host holds to a lower bound
            # is as full at it, and its deployment must scale out, not read it as idle.
            self._load.capacity = self.max_in_flight
            self._load.exit()
        if self._waiting:
            self._waiting.hand_over(lambda: self.in_flight < self.max_in_flight, self._take)


@dataclass(frozen=True)
class EdgeArrival:
    """When a login reached the service's edge, on the replica's monotonic clock."""

    # time.perf_counter() when the replica saw the request, minus any wait a front proxy
    # reported before it (X-Request-Start).
    started: float
    waited_before_ms: float


def parse_request_start(value: str | None, now_unix_s: float) -> float | None:
    """Seconds a front proxy says the request waited before it reached us, or None.

    `X-Request-Start` as nginx (`t=${msec}`), HAProxy (`t=%Ts%ms`) and Heroku-style routers
    write it: unix time in seconds (with a fraction), milliseconds or microseconds, with an
    optional `t=` prefix. The unit is told apart by magnitude.
    """
    if not value:
        return None
    text = value.strip()
    if text.startswith("t="):
        text = text[2:]
    try:
        stamp = float(text)
    except ValueError:
        return None
    if stamp > 1e14:  # microseconds
        stamp /= 1e6
    elif stamp > 1e11:  # milliseconds
        stamp /= 1e3
    return waited_since(stamp, now_unix_s)


def waited_since(sent_unix_s: float, now_unix_s: float) -> float | None:
    """Seconds since a caller's wall-clock stamp of when it sent the request, or None when
    the two clocks disagree by MAX_EDGE_WAIT_S or more (a stamp from another clock)."""
    waited = now_unix_s - sent_unix_s
    if not -MAX_EDGE_WAIT_S < waited < MAX_EDGE_WAIT_S:
        return None
    return max(waited, 0.0)
