"""Per version: the logins this router replica holds on it, against what its replicas take.

A version's supervisors each admit `max_in_flight` logins (app.core.admission) and refuse the
next with a 503. Sent over a Serve handle, that refusal is slow: it crosses the router's and
the supervisor's event loops both ways, on the cores that score the admitted logins (through
the game route, a burst of 1,000 on `make run`: refusals by HAProxy p99 241 ms, by a
supervisor 331 ms, 2026-11-25). Two things keep logins off that path:

- the router never sends a version more logins than the version's running supervisors admit
  (its share of them, when there are several router replicas). A login over that waits in the
  router for a slot, first come first served, for at most what is left of its queue
  allowance (`acquire`): the version turns its slots over in tens of ms, so the login is
  scored rather than refused. A refusal made in a replica's loop, busy with the logins it
  holds, is slower than HAProxy's (a hot player through the game route, 2026-11-26: the
  replicas' refusals set the p99 at 79-210 ms, HAProxy's took a few ms). What cannot wait
  is refused at once, still without the hop;
- a refusal because one supervisor was full, while the version as a whole still had room, is
  tried once more: the handle's power-of-two choice routes a burst unevenly (28 logins at once
  onto 2 supervisors of 16 each: 7 to 12 refused in 2 of 5 bursts, 0 after one more try).
  A supervisor also lets a routed login wait for its own next free slot, within what is
  left of the login's queue allowance (app.core.admission): sent again at once, Serve's
  handle often picked a full supervisor again (a hot player through the game route: 65
  logins in 20 s refused after 3 tries each, while the router held 26-31 of the version's
  32 slots; `make run`, 2026-11-26).

The per-replica bound is learned from the supervisors' own replies (`max_in_flight`), so it
cannot drift from the versions' config; until it is known, nothing is refused or retried here.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from app.core.slot_waiters import SlotWaiters


class VersionLoad:
    def __init__(
        self,
        replicas: Callable[[str], int | None] = lambda version: None,
        routers: Callable[[], int] = lambda: 1,
    ) -> None:
        # version -> its running supervisor replicas (None: not known yet)
        self._replicas = replicas
        # the router replicas sharing the versions (HAProxy spreads logins over them)
        self._routers = routers
        self._in_flight: Counter[str] = Counter()
        self._bound: dict[str, int] = {}
        # version -> logins waiting for one of its slots
        self._waiting: dict[str, SlotWaiters] = {}

    def learn(self, version: str, reply: dict[str, Any]) -> None:
        bound = reply.get("max_in_flight")
        if isinstance(bound, int) and not isinstance(bound, bool) and bound > 0:
            self._bound[version] = bound

    def capacity(self, version: str) -> int | None:
        """The logins this router may hold on the version at once, or None if not known."""
        bound = self._bound.get(version)
        replicas = self._replicas(version)
        if bound is None or replicas is None or replicas <= 0:
            return None
        return max(1, math.ceil(bound * replicas / max(self._routers(), 1)))

    def in_flight(self, version: str) -> int:
        return self._in_flight[version]

    def full(self, version: str) -> bool:
        """Every slot the version has for this router is taken."""
        capacity = self.capacity(version)
        return capacity is not None and self._in_flight[version] >= capacity

    def waiting(self, version: str) -> int:
        return len(self._waiting.get(version, ()))

    async def acquire(self, version: str, wait_s: float) -> bool:
        """Take a slot on the version for one login (`leave` gives it back): at once if the
        version has room and no login waits before this one, else waiting up to `wait_s`.
        False if no slot came in time: the login holds nothing."""
        waiters = self._waiting.get(version)
        if not waiters and not self.full(version):
            self.enter(version)
            return True
        if waiters is None:
            waiters = self._waiting[version] = SlotWaiters()
        return await waiters.wait(wait_s, give_back=lambda: self.leave(version))

    def worth_retrying(self, version: str, reply: dict[str, Any]) -> bool:
        """A supervisor refused because it was full, while this router holds fewer logins on
        the version than its supervisors admit: another has room. Asked once the refused
        login has left (`leave`), so it is not counted."""
        if reply.get("status") != 503 or reply.get("replica_full") is not True:
            return False
        capacity = self.capacity(version)
        return capacity is not None and self._in_flight[version] < capacity

    def enter(self, version: str) -> None:
        self._in_flight[version] += 1

    def leave(self, version: str) -> None:
        self._in_flight[version] -= 1
        if self._in_flight[version] <= 0:
            del self._in_flight[version]
        # The freed slot goes to the login waiting longest (app.core.slot_waiters).
        self._hand_over(version)

    def refresh(self) -> None:
        """Hand slots to waiting logins after the versions' replicas were read again: a
        supervisor that started running (a scale-up, a replica back) adds slots that no
        login's end hands over, and its waiters would otherwise wait for the next one."""
        for version in list(self._waiting):
            self._hand_over(version)

    def _hand_over(self, version: str) -> None:
        waiters = self._waiting.get(version)
        if waiters:
            waiters.hand_over(lambda: not self.full(version), lambda: self.enter(version))
