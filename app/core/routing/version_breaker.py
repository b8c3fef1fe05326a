"""Per version: stop sending logins to a version that keeps failing or staying silent.

The router learns that a version is down from Serve's status (app.serving.router), but only
once Serve's controller has seen its replicas die and the router's next poll has read it:
about 4 s after every supervisor of a version was SIGKILLed (make reliability, version_down,
2026-11-25). Meanwhile every login assigned to it waited out the version's share of the
budget before another version could answer, and those that could not fit into what was left
were refused after more than a second. The breaker cuts that to the logins already in flight
when the version went down.

Closed: every login is tried. After `trip_after` logins in a row failed or timed out, with
nothing answered from the version for `quiet_s`, open: the version is skipped, flagged with
the reason of the latest failure. One login that finds it unavailable (Serve's status, or
the router's handle having seen every supervisor die) opens it at once. The first login
sent to it after `open_s` goes through as a probe while the others keep skipping; the first
answer from the version (any reply, a 503 included: an overloaded version is up), or a
status read showing it up after one showing it down, closes the breaker, and a failure
opens it again for `open_s` (a silent version is probed about every open_s plus its share
of the budget). Probes are paced by time, not by their
outcome, so a probe whose caller went away (cancelled, never reported) cannot keep the
version skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Three in a row, with no answer from the version for QUIET_S: the logins one dead replica
# held all fail at the same moment (the handle does not resend a request a replica had
# accepted) while its other replicas keep answering, and that must not trip the version.
TRIP_AFTER = 3
QUIET_S = 0.5
# How long a tripped version is skipped before one login probes it. A probe that finds it
# still down costs that login the version's share of the budget, so about one per second.
OPEN_S = 1.0


@dataclass
class _State:
    failures: int = 0  # in a row
    reason: str | None = None
    opened_at: float | None = None  # when it tripped or last let a probe through


@dataclass
class VersionBreaker:
    trip_after: int = TRIP_AFTER
    open_s: float = OPEN_S
    quiet_s: float = QUIET_S
    clock: Callable[[], float] = time.monotonic
    _states: dict[str, _State] = field(default_factory=dict)
    _answered_at: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.trip_after < 1 or self.open_s <= 0 or self.quiet_s < 0:
            raise ValueError("trip_after must be >= 1, open_s > 0 and quiet_s >= 0")

    def skip_reason(self, version: str) -> str | None:
        """Why a login may not be sent to the version now (the reason of its latest
        failure), or None: closed, or open with a probe due. Reads only: a router asks this
        of every version while it orders a login's tries, most of which it never sends."""
        state = self._states.get(version)
        if state is None or state.opened_at is None:
            return None
        if self.clock() - state.opened_at < self.open_s:
            return state.reason
        return None

    def is_open(self, version: str) -> bool:
        """Tripped and not closed since: a login sent to it now is a probe."""
        state = self._states.get(version)
        return state is not None and state.opened_at is not None

    def claim(self, version: str) -> str | None:
        """Right before a login is sent to the version: None, and if the breaker is open
        this login is its probe (the next one in open_s); else why to skip it (another
        login took the probe). Claimed only where a login is really sent, so a tripped
        version is probed every open_s whichever version the logins are assigned to."""
        reason = self.skip_reason(version)
        state = self._states.get(version)
        if reason is None and state is not None and state.opened_at is not None:
            state.opened_at = self.clock()
        return reason

    def succeeded(self, version: str) -> None:
        self._states.pop(version, None)
        self._answered_at[version] = self.clock()

    def up_again(self, version: str) -> None:
        """Serve's status shows the version up after showing it down (its deploy, or its
        replicas' death, is over): closed at once, not at the next probe's answer. Left open,
        a version tripped while it deployed stayed open until a login of its own probed it;
        the logins of another version failing over to it in the meantime found the probe
        taken and were refused (make run, version_down, 2026-11-28: the stable version,
        tripped while `make run` deployed it, refused 2 of the canary's players at the kill
        in 5 of 6 runs)."""
        self._states.pop(version, None)

    def failed(self, version: str, reason: str, *, down: bool = False) -> bool:
        """Count a failure; True if it opened a closed breaker. A failure while it is open
        (a failed probe, or a try sent before it opened) keeps it open and says False.

        `down`: the version's own state says no replica of it can answer (Serve's status, or
        its handle having seen every one die), not a guess from silence: it opens at once,
        whatever the count and the quiet time. Counted like the others, the logins its
        handle held at the death waited for the quiet time (make run, version_down,
        2026-11-28: 439-586 ms, one or two a run, against 13-80 ms for the rest)."""
        state = self._states.setdefault(version, _State())
        state.failures += 1
        state.reason = reason
        now = self.clock()
        quiet = now - self._answered_at.get(version, float("-inf")) >= self.quiet_s
        if down or (state.failures >= self.trip_after and quiet):
            was_closed = state.opened_at is None
            state.opened_at = now
            return was_closed
        return False
