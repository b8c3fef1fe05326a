"""A game's front door: send each login to the version the split assigns, or to another.

The router holds no models and reads no features: it picks a version
(app.core.routing.version_split), forwards the login with what is left of its budget, and if
that version's application is missing, not running, failing or silent, tries the next one while
budget remains, flagging the answer (`rerouted_reason`). A version silent for its share is not
given up: its answer, if it comes while the login still has budget, is taken as well as the next
version's (a hedge, not a hand-over), so a host too busy to answer within the share still gives
the player their own version's offer instead of a refusal. A version that failed or stayed silent
for several logins in a row is skipped for a while (app.core.routing.version_breaker). A version
that refuses because it is overloaded (503) is not bypassed: its load would only overload the
next one. A login for a version the router already fills waits in the router for a slot, within
its queue allowance, or is refused by the router without the hop; a version is tried once more
when only one of its supervisors was full (app.core.routing.version_load). When no version can
answer, the caller gets a fast 503 with Retry-After, never a 5xx of another kind."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.admission import OVERLOADED_DETAIL
from app.core.deadline import Deadline
from app.core.load_meter import LoadMeter
from app.core.routing.version_breaker import VersionBreaker
from app.core.routing.version_load import VersionLoad
from app.core.routing.version_split import VersionSplit
from app.core.tally_log import TallyLog

logger = logging.getLogger(__name__)

# Less than this left of the budget is not worth a try: a version needs a few ms to answer
# even with a fallback.
MIN_ATTEMPT_MS = 20.0
# How long past the budget it gave a version the router still waits for its reply (the
# version answers by its deadline; this covers the hop back).
REPLY_GRACE_S = 0.05
# How many more times a login refused by one full supervisor is sent to the same version while
# the version has room (app.core.routing.version_load): Serve's handle can pick the full one again.
FULL_REPLICA_RETRIES = 2
# A full supervisor's wait for a slot ends this long before the try's budget does, so that its
# refusal still gets back through both event loops before the router stops waiting for it
# (which would count as the version's timeout and send the login to another version).
SUPERVISOR_REFUSAL_MARGIN_MS = 100.0


class VersionUnavailable(RuntimeError):
    """The version's application is missing or not running: skip it without waiting."""


# Application states in which a version is not tried whatever its replicas: it is not there yet
# or is going away.
GONE_STATES = frozenset({"NOT_STARTED", "DELETING"})


@dataclass(frozen=True)
class VersionHealth:
    """What the control plane says of one version's application."""

    app_status: str  # Serve's application status: RUNNING, DEPLOYING, UNHEALTHY, ...
    running: int  # RUNNING replicas of its ingress (the supervisor)


def unavailable_reason(health: VersionHealth | None) -> str | None:
    """Why a login should not be sent to this version at all, or None to try it.

    Decided by the ingress replicas that can take a login, not by the application's status:
    Serve marks an application UNHEALTHY from a replica's death until its deployment is back
    at its target replica count, and an autoscaling target the nodes cannot place (e.g. one
    more replica than nodes under max_replicas_per_node) keeps it UNHEALTHY for as long as the
    target stands, while the live replicas answer normally. Skipping on UNHEALTHY sent a
    version's players elsewhere for the whole time (make reliability, 2026-11-25). With no
    running ingress replica, a try would only wait for one, so the version is skipped."""
    if health is None:
        return "not deployed"
    if health.app_status in GONE_STATES:
        return health.app_status
    if health.running <= 0:
        return f"{health.app_status} with no running replica"
    return None


class VersionBackend(Protocol):
    async def offer(
        self, version: str, payload: dict[str, Any], request_id: str | None, wait_ms: float = 0.0
    ) -> dict[str, Any]:
        """The version's reply: {"status": 200, "body": ...} or {"status": 503|404, ...}.
        `wait_ms`: how long a full supervisor may hold the login for a slot of its own, out
        of `payload["deadline_ms"]`, before refusing it."""
        ...


@dataclass(frozen=True)
class RoutedReply:
    status: int
    assigned: str
    answered: str | None = None
    reason: str | None = None  # why `answered` is not `assigned`
    body: dict[str, Any] | None = None
    detail: str | None = None
    retry_after_s: float | None = None


@dataclass(frozen=True)
class _LateTry:
    """A try whose version stayed silent for its share, still running: its answer is taken if
    it comes while the login has budget left. It holds the version's slot until it ends."""

    version: str
    call: asyncio.Future[dict[str, Any]]


class OfferRouter:
    def __init__(
        self,
        split: VersionSplit,
        backend: VersionBackend,
        *,
        budget_ms: float,
        failover_reserve_ms: float,
        retry_after_s: float,
        on_routed: Callable[[str, str, str], None] | None = None,
        breaker: VersionBreaker | None = None,
        load: VersionLoad | None = None,
        meter: LoadMeter | None = None,
        queue_timeout_ms: float = 0.0,
    ) -> None:
        self._backend = backend
        # How long a login may wait for room, in HAProxy's queue and for a version's slot
        # here together (the edge's `timeout queue`); 0: a full version is refused at once.
        self._queue_timeout_ms = max(queue_timeout_ms, 0.0)
        # Logins this replica holds, over its edge bound: what the router autoscales on.
        self._meter = meter
        self._breaker = breaker or VersionBreaker()
        # version -> resolved (with the reason) when its breaker opens: the tries still
        # waiting on it stop waiting and go to the next version (`_call`).
        self._tripped: dict[str, asyncio.Future[str]] = {}
        self._load = load or VersionLoad()
        self.configure(split, budget_ms=budget_ms, failover_reserve_ms=failover_reserve_ms)
        self._retry_after_s = retry_after_s
        self._on_routed = on_routed or (lambda assigned, answered, reason: None)
        self._problems = TallyLog(logger, "rerouted logins")

    def configure(
        self, split: VersionSplit, *, budget_ms: float, failover_reserve_ms: float
    ) -> None:
        """Live knobs: the next login uses them; logins in flight keep their own."""
        if budget_ms <= 0 or not 0 <= failover_reserve_ms < budget_ms:
            raise ValueError("budget_ms must be > 0 and 0 <= failover_reserve_ms < budget_ms")
        self.split = split
        self._budget_ms = budget_ms
        self._reserve_ms = failover_reserve_ms

    def version_up(self, version: str) -> None:
        """Serve's status shows the version up again after showing it down: its breaker
        closes (VersionBreaker.up_again)."""
        self._breaker.up_again(version)

    async def route(
        self, payload: dict[str, Any], request_id: str | None, *, waited_ms: float = 0.0
    ) -> RoutedReply:
        """`waited_ms`: how long the login already waited before the router saw it (the edge's
        queue, X-Request-Start); it comes off the budget, so every version the login is sent
        to keeps its original deadline."""
        if self._meter is None:
            return await self._route(payload, request_id, waited_ms)
        self._meter.enter()
        try:
            return await self._route(payload, request_id, waited_ms)
        finally:
            self._meter.exit()

    async def _route(
        self, payload: dict[str, Any], request_id: str | None, waited_ms: float
    ) -> RoutedReply:
        late: list[_LateTry] = []
        try:
            return await self._route_tries(payload, request_id, waited_ms, late)
        finally:
            for t in late:
                if not t.call.done():
                    t.call.cancel()
                self._load.leave(t.version)

    async def _route_tries(
        self,
        payload: dict[str, Any],
        request_id: str | None,
        waited_ms: float,
        late: list[_LateTry],
    ) -> RoutedReply:
        budget_ms = self._budget_ms - max(waited_ms, 0.0)
        if payload.get("deadline_ms") is not None:
            budget_ms = min(budget_ms, float(payload["deadline_ms"]))
        deadline = Deadline.start(budget_ms)
        queue_left_ms = self._queue_timeout_ms - max(waited_ms, 0.0)
        self._problems.tick()
        split = self.split  # one split per login, even if the weights change meanwhile
        assigned = split.assign(str(payload["player_id"]))
        reason: str | None = None
        order: list[str] = []
        for version in [assigned, *split.alternatives(assigned)]:
            skipped = self._breaker.skip_reason(version)
            if skipped is None:
                order.append(version)
                continue
            # It failed or stayed silent for the last logins: do not spend this one's budget
            # finding out again, nor keep a reserve for it (app.core.routing.version_breaker).
            if version == assigned:
                reason = skipped
            self._problems.record(f"{version}: skipped", f"breaker open ({skipped})")
        retries = 0
        i = 0
        while i < len(order):
            version = order[i]
            last = i == len(order) - 1
            left_ms = deadline.remaining_s() * 1000.0
            # Keep a reserve for the next version unless this is the last one to try.
            give_ms = left_ms if last else left_ms - self._reserve_ms
            if give_ms < MIN_ATTEMPT_MS:
                if last or left_ms < MIN_ATTEMPT_MS:
                    break
                give_ms = left_ms
            # The probe of a tripped version is taken here, before the wait for its slot:
            # taken after it, every login that listed the version while the probe was due
            # waited for one of a dead version's slots before finding the probe gone.
            probing = self._breaker.is_open(version)
            skipped = self._breaker.claim(version)
            if skipped is not None:
                # Open, and another login took its probe since this one's tries were ordered.
                if version == assigned:
                    reason = reason or skipped
                self._problems.record(f"{version}: skipped", f"breaker open ({skipped})")
                i += 1
                continue
            if probing and not last:
                # A probe gets what a failover gets: a live version answers in that (its
                # supervisor answers by the deadline it is given), and a dead one costs the
                # login little of what the next version needs. One probe a second, each
                # waiting out the version's whole share, refused logins during an outage.
                give_ms = min(give_ms, max(self._reserve_ms, MIN_ATTEMPT_MS))
            # This router may already hold every login the version's supervisors admit: the
            # login waits for one of them to finish, as long as its queue allowance and its
            # try's budget allow (a supervisor would refuse it, only later and slower).
            wait_ms = min(queue_left_ms, give_ms - MIN_ATTEMPT_MS)
            started_ms = deadline.elapsed_ms()
            tripped = self._tripped_future(version)
            if not await self._load.acquire(version, wait_ms / 1000.0):
                return self._refused(assigned, reason, OVERLOADED_DETAIL, self._retry_after_s)
            if tripped.done():
                # The version's breaker opened while this login waited for its slot (the
                # slot is one an abandoned try gave back): go on to the next version.
                self._load.leave(version)
                reason = reason or tripped.result()
                i += 1
                continue
            waited = deadline.elapsed_ms() - started_ms
            queue_left_ms -= waited
            give_ms -= waited
            if give_ms < MIN_ATTEMPT_MS:
                # The slot came (or the loop resumed) too late to try: give it back.
                self._load.leave(version)
                return self._refused(assigned, reason, OVERLOADED_DETAIL, self._retry_after_s)
            # What is left of the allowance, a full supervisor may spend waiting for one of
            # its own slots: Serve's handle spreads logins by stale queue lengths, and sent
            # again at once a refused login often found the same supervisor full.
            supervisor_wait_ms = max(
                0.0,
                min(queue_left_ms, give_ms - MIN_ATTEMPT_MS - SUPERVISOR_REFUSAL_MARGIN_MS),
            )
            called_ms = deadline.elapsed_ms()
            answer = await self._call(
                version, give_ms, payload, request_id, supervisor_wait_ms, tripped, late
            )
            # A try that did not answer may have spent its wait in the supervisor: it comes off
            # the allowance, so that a retry or the next version cannot wait it again.
            queue_left_ms -= min(deadline.elapsed_ms() - called_ms, supervisor_wait_ms)
            if isinstance(answer, str):
                reason = reason or answer
                i += 1
                continue
            version, reply = answer  # a late try's answer names its own version
            self._load.learn(version, reply)
            status = int(reply.get("status", 500))
            if status in (200, 503):
                self._breaker.succeeded(version)  # it answered: up, if perhaps overloaded
            else:
                self._failed(version, "failed")
            if status == 200:
                return self._answered(assigned, version, reason, reply)
            if status == 503:
                if retries < FULL_REPLICA_RETRIES and self._load.worth_retrying(version, reply):
                    # One supervisor was full while the version had room on another.
                    retries += 1
                    continue
                # Overloaded (or out of budget): back off rather than spill onto the others.
                return self._refused(
                    assigned,
                    reason,
                    str(reply.get("detail", "overloaded")),
                    float(reply.get("retry_after_s", self._retry_after_s)),
                )
            reason = reason or "failed"
            self._problems.record(f"{version}: status {status}", str(reply.get("detail")))
            i += 1
        # No version left to try, or none worth it: a silent one may still answer in time.
        # Only within the budget: each try's own grace is spent, and a refusal past it
        # would meet the edge's answer timeout (budget + 100 ms).
        found = await self._late_answer(late, deadline.remaining_s())
        if found is not None:
            version, reply = found
            self._load.learn(version, reply)
            self._breaker.succeeded(version)
            return self._answered(assigned, version, reason, reply)
        self._on_routed(assigned, "none", reason or "timeout")
        return RoutedReply(
            503,
            assigned,
            reason=reason,
            detail=f"no version of {split.game} could answer in time "
            f"(assigned {assigned}: {reason or 'timeout'})",
            retry_after_s=self._retry_after_s,
        )

    async def _call(
        self,
        version: str,
        give_ms: float,
        payload: dict[str, Any],
        request_id: str | None,
        wait_ms: float,
        tripped: asyncio.Future[str],
        late: list[_LateTry],
    ) -> tuple[str, dict[str, Any]] | str:
        """(the version that answered, its reply), or why there is none (unavailable |
        timeout | failed), with the breaker and the problem log told. The login holds one of
        the version's slots (`VersionLoad.acquire`); it gives it back here, unless the try
        stays silent for its share: then it joins `late` and keeps the slot while it runs.
        A late try's answer (a 200) is taken in place of this one's if it comes first.

        A try also stops waiting when the version's breaker opens meanwhile: the logins in
        flight on a version whose supervisors all died would otherwise each wait out their
        own share of the budget, and those sent last had too little left for another
        version (make reliability, version_down, 2026-11-26: answers at 850-1,047 ms and one
        503 at 1,068 ms for logins sent in the 0.8 s before the breaker opened)."""
        found = self._take_late(late)
        if found is not None:
            # A silent try answered while this one waited for its slot: no call needed.
            self._load.leave(version)
            return found
        call = asyncio.ensure_future(
            self._backend.offer(
                version, {**payload, "deadline_ms": int(give_ms)}, request_id, wait_ms
            )
        )
        loop = asyncio.get_running_loop()
        until = loop.time() + give_ms / 1000.0 + REPLY_GRACE_S
        silent = False
        try:
            while True:
                left_s = until - loop.time()
                if left_s <= 0:
                    raise TimeoutError
                waiting: set[asyncio.Future[Any]] = {call, tripped, *(t.call for t in late)}
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=left_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if call in done:
                    return version, call.result()
                if tripped in done:
                    self._problems.record(
                        f"{version}: abandoned", f"breaker opened ({tripped.result()})"
                    )
                    return str(tripped.result())
                found = self._take_late(late)
                if found is not None:
                    return found
                if not done:
                    raise TimeoutError
        except VersionUnavailable as exc:
            # Counted like a failure: once Serve's status says the version is down, the
            # logins the breaker skips are flagged with that, not with what tripped it. It
            # opens the breaker at once: nothing of the version can answer.
            self._failed(version, "unavailable", down=True)
            self._problems.record(f"{version}: unavailable", str(exc))
            return "unavailable"
        except TimeoutError:
            # Only a version silent for a fair share of a budget is suspect: under load a
            # login with little left (a tight caller deadline, a long edge queue) times out
            # on a healthy version, and counting it could trip the busiest one.
            if give_ms >= (self._budget_ms - self._reserve_ms) / 2:
                self._failed(version, "timeout")
            self._problems.record(f"{version}: timeout", f"no reply in {give_ms:.0f} ms")
            silent = not tripped.done()
            return "timeout"
        except Exception as exc:  # noqa: BLE001 - any failure of one version: try the next
            self._failed(version, "failed")
            self._problems.record(f"{version}: {type(exc).__name__}", str(exc))
            return "failed"
        finally:
            if silent:
                late.append(_LateTry(version, call))
            else:
                if not call.done():
                    call.cancel()
                self._load.leave(version)

    def _take_late(self, late: list[_LateTry]) -> tuple[str, dict[str, Any]] | None:
        """The first late try that answered 200, as (version, reply); every late try that
        ended is dropped from `late` and gives its slot back. A late refusal or failure is
        not an answer: the login is already elsewhere."""
        found: tuple[str, dict[str, Any]] | None = None
        for t in [t for t in late if t.call.done()]:
            late.remove(t)
            self._load.leave(t.version)
            if found is None and not t.call.cancelled() and t.call.exception() is None:
                reply = t.call.result()
                if int(reply.get("status", 500)) == 200:
                    found = (t.version, reply)
        return found

    async def _late_answer(
        self, late: list[_LateTry], within_s: float
    ) -> tuple[str, dict[str, Any]] | None:
        """Wait up to `within_s` for a late try's 200 (see _take_late)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within_s
        while late:
            found = self._take_late(late)
            if found is not None:
                return found
            left_s = until - loop.time()
            if left_s <= 0 or not late:
                return None
            done, _ = await asyncio.wait(
                {t.call for t in late}, timeout=left_s, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                return None
        return None

    def _answered(
        self, assigned: str, version: str, reason: str | None, reply: dict[str, Any]
    ) -> RoutedReply:
        body = dict(reply["body"])
        why = None if version == assigned else reason
        body["assigned_version"] = assigned
        body["rerouted_reason"] = why
        self._on_routed(assigned, version, why or "none")
        return RoutedReply(200, assigned, version, why, body=body)

    def _tripped_future(self, version: str) -> asyncio.Future[str]:
        loop = asyncio.get_running_loop()
        tripped = self._tripped.get(version)
        if tripped is None or tripped.done() or tripped.get_loop() is not loop:
            tripped = self._tripped[version] = loop.create_future()
        return tripped

    def _failed(self, version: str, reason: str, *, down: bool = False) -> None:
        """Tell the breaker; if that opened it, every try waiting on the version stops."""
        if self._breaker.failed(version, reason, down=down):
            tripped = self._tripped.pop(version, None)
            if tripped is not None and not tripped.done():
                tripped.set_result(reason)

    def _refused(
        self, assigned: str, reason: str | None, detail: str, retry_after_s: float
    ) -> RoutedReply:
        self._on_routed(assigned, "none", "refused")
        return RoutedReply(503, assigned, reason=reason, detail=detail, retry_after_s=retry_after_s)

    def close(self) -> None:
        self._problems.flush()
