"""A bounded HTTP load generator that records every login as the caller sees it.

Two shapes of load, both on one asyncio loop with aiohttp (no connection limit on the client
side, so the client never queues a login of its own):
  - open loop: logins are sent on a schedule (a constant rate, or a burst all at once),
    whatever the answers; an overloaded service cannot lower its own offered load;
  - closed loop: N clients, each sending its next login when the last one is answered.

Every login ends as exactly one Shot: an HTTP status, or "no answer" (the client's timeout,
or the connection failed). Latency is measured from just before the request is written to
when the whole body is read, so it includes every queue in front of the service.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import aiohttp

# Longer than any budget the service can be configured with: past it, a login "got no answer".
NO_ANSWER_AFTER_S = 10.0

# The client's event loop. asyncio's own is the default: uvloop (as the replicas run) showed
# no gain the runs could resolve (docs/reliability.md, 2026-11-26), and the earlier runs'
# figures were all taken on asyncio.
CLIENT_LOOPS = ("asyncio", "uvloop")

T = TypeVar("T")


def run_client(main: Coroutine[Any, Any, T], loop: str = "asyncio") -> T:
    """Run a load client's coroutine to its end on a new event loop of the given kind, with
    Python's garbage collector paused: a collection stops the client's loop, and every login
    in flight then reads its answer late. The client floor of a burst of 1,000 at HAProxy's
    own /-/healthz was 237-275 ms with it and 141-148 ms without (make run, 2026-11-26,
    3 interleaved pairs). A run's objects are few enough to keep until it ends."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return _run_on(main, loop)
    finally:
        if was_enabled:
            gc.enable()


def _run_on(main: Coroutine[Any, Any, T], loop: str) -> T:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    if loop == "asyncio":
        return asyncio.run(main)
    main.close()
    raise ValueError(f"unknown client loop {loop!r}: one of {CLIENT_LOOPS}")


@dataclass(frozen=True)
class Shot:
    sent_s: float  # seconds since the start of the run
    latency_ms: float  # until the answer (or until the client gave up)
    status: int | None  # None: no answer
    personalized: bool | None = None
    fallback_reason: str | None = None
    retry_after: str | None = None
    error: str | None = None
    # The service's own view of the login (timings.total_ms): the gap to latency_ms is time
    # spent outside the budget's clock (network, ingress, loop lag on either side).
    server_ms: float | None = None
    # online | precomputed | default (the answer's `tier`)
    tier: str | None = None
    # Through a game's route: the version that answered, and why it was not the player's own.
    version: str | None = None
    rerouted_reason: str | None = None
    # A login whose connection was closed with no answer is still counted unanswered; it is
    # then sent once more, at once, on a new connection, as docs/api.md tells game servers
    # to: what that one resend got (None: not resent, or no answer again) and how long it took.
    resend_status: int | None = None
    resend_ms: float | None = None
    # How late this client sent it against its schedule (open loop only): the client's own
    # stall (its event loop held up), which delays the logins it has in flight too. Latency
    # counts from the send, so a figure taken while the client stalls is the client's.
    late_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


PlayerPicker = Callable[[int], str]


def random_players(players: int, seed: int = 7, unknown_share: float = 0.02) -> PlayerPicker:
    """Seeded players of the population (p0000000 ...), some unknown ones mixed in as in life
    (by default ~2% logins of players the table does not hold: new installs)."""
    rng = random.Random(seed)

    def pick(_i: int) -> str:
        if unknown_share and rng.random() < unknown_share:
            return f"new{rng.randrange(10**6):06d}"
        return f"p{rng.randrange(players):07d}"

    return pick


def one_player(player: str) -> PlayerPicker:
    return lambda _i: player


def constant_rate(rps: float, seconds: float) -> list[float]:
    """Send times (s) of an open-loop run at a fixed rate."""
    return [i / rps for i in range(int(rps * seconds))]


def constant_rate_until(rps: float, stop: threading.Event) -> Iterator[float]:
    """Send times (s) of an open-loop run at a fixed rate until `stop` is set: for a load
    that must cover an event whose time is not known in advance (it is read at each send)."""
    i = 0
    while not stop.is_set():
        yield i / rps
        i += 1


def burst(n: int, at_s: float = 0.0) -> list[float]:
    return [at_s] * n


class Caller:
    """Posts logins to one application and turns each into a Shot."""

    def __init__(self, base_url: str, game: str, *, timeout_s: float = NO_ANSWER_AFTER_S) -> None:
        self.url = f"{base_url.rstrip('/')}/v1/offers"
        self.game = game
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.started = time.monotonic()

    async def login(
        self, session: aiohttp.ClientSession, player: str, due: float | None = None
    ) -> Shot:
        """One login; `due` is when the schedule meant to send it (time.monotonic())."""
        sent = time.monotonic()
        late_ms = round((sent - due) * 1000.0, 1) if due is not None else None
        payload = {"player_id": player, "game": self.game}
        try:
            async with session.post(self.url, json=payload, timeout=self.timeout) as response:
                raw = await response.read()
                latency_ms = (time.monotonic() - sent) * 1000.0
                body: dict[str, Any] = {}
                if response.status == 200:
                    body = json.loads(raw)
                return Shot(
                    sent_s=sent - self.started,
                    latency_ms=latency_ms,
                    status=response.status,
                    personalized=body.get("personalized"),
                    fallback_reason=body.get("fallback_reason"),
                    retry_after=response.headers.get("Retry-After"),
                    server_ms=body.get("timings", {}).get("total_ms"),
                    tier=body.get("tier"),
                    version=body.get("ensemble_version"),
                    rerouted_reason=body.get("rerouted_reason"),
                    late_ms=late_ms,
                )
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            latency_ms = (time.monotonic() - sent) * 1000.0
            # Only a close without an answer is resent: a timeout is a hang, never retried.
            closed = isinstance(exc, aiohttp.ServerDisconnectedError)
            status, resend_ms = await self._resend(payload) if closed else (None, None)
            return Shot(
                sent_s=sent - self.started,
                latency_ms=latency_ms,
                status=None,
                error=f"{type(exc).__name__}: {exc}"[:200],
                resend_status=status,
                resend_ms=resend_ms,
                late_ms=late_ms,
            )

    async def _resend(self, payload: dict[str, str]) -> tuple[int | None, float]:
        """The documented client's one resend, on a connection of its own."""
        sent = time.monotonic()
        connector = aiohttp.TCPConnector(force_close=True)
        try:
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.post(self.url, json=payload, timeout=self.timeout) as response,
            ):
                await response.read()
                status: int | None = response.status
        except (TimeoutError, aiohttp.ClientError):
            status = None
        return status, round((time.monotonic() - sent) * 1000.0, 1)


def _session() -> aiohttp.ClientSession:
    # No client-side connection limit: an open-loop schedule must not queue in the client.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=False))


async def open_loop(caller: Caller, schedule: Iterable[float], players: PlayerPicker) -> list[Shot]:
    """Send one login at each offset of `schedule` (seconds from now), whatever the answers."""
    async with _session() as session:
        caller.started = time.monotonic()
        tasks = []
        for i, offset in enumerate(schedule):
            delay = caller.started + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            due = caller.started + offset
            tasks.append(asyncio.create_task(caller.login(session, players(i), due)))
        return list(await asyncio.gather(*tasks))


async def closed_loop(
    caller: Caller, clients: int, seconds: float, players: PlayerPicker
) -> list[Shot]:
    """`clients` callers, each sending its next login as soon as the last one is answered."""
    shots: list[Shot] = []
    async with _session() as session:
        caller.started = time.monotonic()
        stop_at = caller.started + seconds

        async def client(k: int) -> None:
            i = k
            while time.monotonic() < stop_at:
                shot = await caller.login(session, players(i))
                shots.append(shot)
                i += clients
                if shot.status == 503 and shot.retry_after:
                    # A well-behaved game server backs off as told, up to what is left.
                    await asyncio.sleep(min(float(shot.retry_after), stop_at - time.monotonic()))

        await asyncio.gather(*(client(k) for k in range(clients)))
    return sorted(shots, key=lambda s: s.sent_s)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return round(ordered[index], 1)


def summarize(shots: Sequence[Shot]) -> dict[str, Any]:
    """The figures the reliability report keeps per scenario (loadtest/reliability/)."""
    answered = [s for s in shots if s.status is not None]
    accepted = [s for s in answered if s.status != 503]
    refused = [s for s in answered if s.status == 503]
    status_counts: dict[str, int] = {}
    for s in shots:
        key = "no_answer" if s.status is None else str(s.status)
        status_counts[key] = status_counts.get(key, 0) + 1
    ok = [s for s in accepted if s.status == 200]
    reasons: dict[str, float] = {}
    tiers: dict[str, int] = {}
    for s in ok:
        if s.fallback_reason is not None:
            reasons[s.fallback_reason] = reasons.get(s.fallback_reason, 0) + 1
        tiers[s.tier or "unknown"] = tiers.get(s.tier or "unknown", 0) + 1
    return {
        "sent": len(shots),
        "answered": len(answered),
        "status_counts": dict(sorted(status_counts.items())),
        "http_5xx_non503": sum(1 for s in answered if s.status >= 500 and s.status != 503),
        "no_answer": len(shots) - len(answered),
        "client_p50_ms": percentile([s.latency_ms for s in accepted], 50),
        "client_p99_ms": percentile([s.latency_ms for s in accepted], 99),
        "client_max_ms": round(max((s.latency_ms for s in accepted), default=0.0), 1) or None,
        "refusal_p99_ms": percentile([s.latency_ms for s in refused], 99),
        "fallback_share_by_reason": {
            reason: round(count / len(ok), 4) for reason, count in sorted(reasons.items())
        },
        "refused_without_retry_after": sum(1 for s in refused if not s.retry_after),
        # Where the 200s' offers came from: online, precomputed (the batch run's offer, when
        # the online path failed) or default.
        "tier_share": {tier: round(count / len(ok), 4) for tier, count in sorted(tiers.items())},
        # The unanswered logins closed without an answer, and what their one resend got.
        "resent_after_close": _resends(shots),
        # The client's own stalls (open loop): the latest send against its schedule.
        "client_late_max_ms": max(
            (s.late_ms for s in shots if s.late_ms is not None), default=None
        ),
    }


def _resends(shots: Sequence[Shot]) -> dict[str, Any]:
    resent = [s for s in shots if s.status is None and s.resend_ms is not None]
    counts: dict[str, int] = {}
    for s in resent:
        key = "no_answer" if s.resend_status is None else str(s.resend_status)
        counts[key] = counts.get(key, 0) + 1
    return {
        "resent": len(resent),
        "status_counts": dict(sorted(counts.items())),
        "max_ms": max((s.resend_ms or 0.0 for s in resent), default=None),
    }
