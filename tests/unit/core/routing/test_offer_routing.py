"""The game router: assigned version first, the others when it is down, failing or silent."""

import asyncio

import pytest

from app.core.routing.offer_routing import (
    FULL_REPLICA_RETRIES,
    MIN_ATTEMPT_MS,
    SUPERVISOR_REFUSAL_MARGIN_MS,
    OfferRouter,
    VersionHealth,
    VersionUnavailable,
    unavailable_reason,
)
from app.core.routing.version_breaker import VersionBreaker
from app.core.routing.version_load import VersionLoad
from app.core.routing.version_split import VersionSplit

pytestmark = pytest.mark.unit

GAME = "galaxy-raiders"
OK = {"status": 200, "body": {"offer": "x", "personalized": True}}


class Backend:
    """Each version's behaviour: a reply dict, an exception to raise, or "hang"; a list of
    those is one per call, in order; an asyncio.Event is waited on, then answers OK."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.calls = []
        self.waits = []  # how long each call let a full supervisor hold the login

    async def offer(self, version, payload, request_id, wait_ms=0.0):
        self.calls.append((version, payload["deadline_ms"]))
        self.waits.append(wait_ms)
        what = self.behaviour[version]
        if isinstance(what, list):
            what = what.pop(0)
        if isinstance(what, asyncio.Event):
            await what.wait()
            what = OK
        if what == "hang":
            await asyncio.sleep(60)
        if isinstance(what, Exception):
            raise what
        return {**what, "body": {**what["body"], "version": version}} if "body" in what else what


def router(
    backend, weights=None, budget_ms=400, reserve_ms=150, breaker=None, load=None, queue_ms=0.0
):
    routed = []
    split = VersionSplit(GAME, ["stable", "canary"], weights or {"stable": 0, "canary": 1})
    r = OfferRouter(
        split,
        backend,
        budget_ms=budget_ms,
        failover_reserve_ms=reserve_ms,
        retry_after_s=2,
        on_routed=lambda *a: routed.append(a),
        breaker=breaker,
        load=load,
        queue_timeout_ms=queue_ms,
    )
    return r, routed


def route(r, player="p1"):
    return asyncio.run(r.route({"player_id": player, "game": GAME}, None))


def test_the_assigned_version_answers_with_the_budget_minus_the_reserve():
    backend = Backend({"canary": OK, "stable": OK})
    r, routed = router(backend)
    reply = route(r)
    assert reply.status == 200 and reply.answered == "canary" and reply.reason is None
    assert reply.body["assigned_version"] == "canary" and reply.body["rerouted_reason"] is None
    assert backend.calls[0][0] == "canary" and 240 <= backend.calls[0][1] <= 250
    assert routed == [("canary", "canary", "none")]


@pytest.mark.parametrize(
    "failure, reason",
    [
        (VersionUnavailable("gone"), "unavailable"),
        (RuntimeError("replica died"), "failed"),
        ({"status": 404, "detail": "no"}, "failed"),
        ("hang", "timeout"),
    ],
)
def test_a_failing_assigned_version_hands_its_players_to_another_flagged(failure, reason):
    backend = Backend({"canary": failure, "stable": OK})
    r, routed = router(backend)
    reply = route(r)
    assert reply.status == 200
    assert reply.body["version"] == "stable"
    assert reply.body["assigned_version"] == "canary"
    assert reply.body["rerouted_reason"] == reason
    assert routed == [("canary", "stable", reason)]
    # The silent version got the budget minus the reserve; the other one what was left.
    if failure == "hang":
        assert [v for v, _ in backend.calls] == ["canary", "stable"]
        assert backend.calls[1][1] <= 160


def test_an_overloaded_version_is_not_bypassed():
    backend = Backend(
        {"canary": {"status": 503, "detail": "busy", "retry_after_s": 3}, "stable": OK}
    )
    r, _ = router(backend)
    reply = route(r)
    assert reply.status == 503 and reply.retry_after_s == 3
    assert [v for v, _ in backend.calls] == ["canary"]


def test_no_version_answering_is_a_503_with_retry_after():
    backend = Backend({"canary": VersionUnavailable("x"), "stable": RuntimeError("y")})
    r, routed = router(backend)
    reply = route(r)
    assert reply.status == 503 and reply.retry_after_s == 2
    assert "unavailable" in reply.detail
    assert [v for v, _ in backend.calls] == ["canary", "stable"]  # both were tried
    assert routed == [("canary", "none", "unavailable")]


def test_a_callers_deadline_caps_the_budget():
    backend = Backend({"canary": OK, "stable": OK})
    r, _ = router(backend, budget_ms=1000, reserve_ms=100)
    asyncio.run(r.route({"player_id": "p1", "game": GAME, "deadline_ms": 300}, None))
    assert backend.calls[0][1] <= 200


def test_the_wait_at_the_edge_comes_off_every_versions_budget():
    """A login that waited in HAProxy's queue keeps its original deadline through a reroute."""
    backend = Backend({"canary": VersionUnavailable("down"), "stable": OK})
    r, _ = router(backend, budget_ms=1000, reserve_ms=100)
    reply = asyncio.run(r.route({"player_id": "p1", "game": GAME}, None, waited_ms=400))
    assert reply.status == 200 and reply.answered == "stable"
    (first, given_first), (second, given_second) = backend.calls
    assert (first, second) == ("canary", "stable")
    assert 490 <= given_first <= 500  # 1000 - 400 waited - 100 reserve
    assert given_second <= 600  # what is left of the original 1000, not a new budget


def test_a_login_that_waited_out_its_budget_at_the_edge_is_refused_unsent():
    backend = Backend({"canary": OK, "stable": OK})
    r, _ = router(backend, budget_ms=1000, reserve_ms=100)
    reply = asyncio.run(r.route({"player_id": "p1", "game": GAME}, None, waited_ms=1200))
    assert reply.status == 503 and backend.calls == []


def test_new_weights_apply_to_the_next_login():
    backend = Backend({"canary": OK, "stable": OK})
    r, _ = router(backend)
    r.split = VersionSplit(GAME, ["stable", "canary"], {"stable": 1, "canary": 0})
    assert route(r).answered == "stable"


@pytest.mark.parametrize(
    ("health", "tried"),
    [
        # A replica died and the deployment is not back at its target count: Serve says
        # UNHEALTHY, but the live replica answers, so the version is tried.
        (VersionHealth("UNHEALTHY", running=1), True),
        (VersionHealth("RUNNING", running=2), True),
        (VersionHealth("DEPLOYING", running=1), True),  # a rolling update keeps serving
        (VersionHealth("DEPLOY_FAILED", running=1), True),  # the old replicas still answer
        (VersionHealth("UNHEALTHY", running=0), False),  # every supervisor is down
        (VersionHealth("DEPLOYING", running=0), False),  # nothing up yet
        (VersionHealth("DELETING", running=2), False),
        (VersionHealth("NOT_STARTED", running=0), False),
        (None, False),  # not deployed
    ],
)
def test_a_version_is_skipped_only_when_no_supervisor_can_answer(health, tried):
    why = unavailable_reason(health)
    assert (why is None) is tried
    if not tried:
        assert why  # the reason goes into the log and the 503's detail


def test_a_version_silent_for_logins_in_a_row_is_skipped_at_once_then_probed():
    """After every supervisor of a version died, Serve's status says so seconds later; until
    then each of its logins would wait out the version's share of the budget. After three
    silent logins in a row the next ones go straight to the other version, flagged."""
    clock = [0.0]
    backend = Backend({"canary": "hang", "stable": OK})
    r, _ = router(
        backend,
        budget_ms=200,
        reserve_ms=150,
        breaker=VersionBreaker(trip_after=3, open_s=1.0, clock=lambda: clock[0]),
    )
    for _ in range(3):
        assert route(r).body["rerouted_reason"] == "timeout"
    assert [v for v, _ in backend.calls] == ["canary", "stable"] * 3
    backend.calls.clear()
    reply = route(r)
    assert reply.status == 200 and reply.body["version"] == "stable"
    assert reply.body["rerouted_reason"] == "timeout"
    assert [v for v, _ in backend.calls] == ["stable"]  # canary not tried
    assert backend.calls[0][1] > 150  # and stable got the whole budget, not what was left
    # A second later one login probes the canary; it is back, and takes its players again.
    clock[0] += 1.0
    backend.behaviour["canary"] = OK
    backend.calls.clear()
    assert route(r).body["version"] == "canary"
    assert route(r).body["version"] == "canary"
    assert [v for v, _ in backend.calls] == ["canary", "canary"]


def test_only_a_login_sent_to_a_tripped_version_takes_its_probe():
    """Every login orders its tries over every version, tripped ones included. A login
    answered by its own version never reached the tripped one: the probe is left to the next
    login that is sent there, so a tripped version is probed every open_s whatever its
    weight (a probe taken by every login that merely listed it kept a 1 % canary's players
    away for minutes)."""
    clock = [0.0]
    backend = Backend({"canary": OK, "stable": OK})
    breaker = VersionBreaker(trip_after=1, open_s=1.0, clock=lambda: clock[0])
    r, _ = router(backend, weights={"stable": 50, "canary": 50}, breaker=breaker)
    split = VersionSplit(GAME, ["stable", "canary"], {"stable": 50, "canary": 50})
    players = [f"p{i}" for i in range(100)]
    of_canary = next(p for p in players if split.assign(p) == "canary")
    of_stable = next(p for p in players if split.assign(p) == "stable")
    breaker.failed("stable", "timeout")
    assert route(r, of_stable).body["rerouted_reason"] == "timeout"  # skipped while open
    clock[0] += 1.0
    assert route(r, of_canary).body["version"] == "canary"  # listed stable, never sent there
    backend.calls.clear()
    reply = route(r, of_stable)  # the probe: stable is back and takes its player again
    assert reply.body["version"] == "stable" and reply.body["rerouted_reason"] is None
    assert [v for v, _ in backend.calls] == ["stable"]


def test_a_probe_of_a_tripped_version_gets_a_failovers_share_of_the_budget():
    """A probe of a version still down costs its login only the failover reserve; the rest
    of the budget goes to the version that answers."""
    clock = [0.0]
    backend = Backend({"canary": "hang", "stable": OK})
    breaker = VersionBreaker(trip_after=1, open_s=1.0, quiet_s=0.0, clock=lambda: clock[0])
    r, _ = router(backend, budget_ms=400, reserve_ms=150, breaker=breaker)
    breaker.failed("canary", "timeout")
    clock[0] += 1.0  # the probe is due
    reply = route(r)
    assert (reply.status, reply.body["version"]) == (200, "stable")
    (probed, probe_ms), (answered, answer_ms) = backend.calls
    assert (probed, answered) == ("canary", "stable")
    # Not 250 ms for the probe, and what is left after it and the hop back (~100 ms).
    assert probe_ms <= 150 and answer_ms > 150


def test_an_overloaded_version_never_trips_the_breaker():
    backend = Backend(
        {"canary": {"status": 503, "detail": "busy", "retry_after_s": 1}, "stable": OK}
    )
    r, _ = router(backend)
    for _ in range(10):
        assert route(r).status == 503
    assert [v for v, _ in backend.calls] == ["canary"] * 10


def test_once_the_status_says_a_tripped_version_is_down_its_skips_say_unavailable():
    """The breaker tripped on failures (a version being deleted fails its last calls); the
    probe then finds Serve's status saying the version is gone, and the logins skipped from
    then on are flagged `unavailable`, not `failed`."""
    clock = [0.0]
    backend = Backend({"canary": RuntimeError("replica stopping"), "stable": OK})
    r, _ = router(
        backend,
        budget_ms=400,
        reserve_ms=150,
        breaker=VersionBreaker(trip_after=3, open_s=1.0, clock=lambda: clock[0]),
    )
    assert [route(r).body["rerouted_reason"] for _ in range(4)] == ["failed"] * 4
    backend.behaviour["canary"] = VersionUnavailable("deleted")
    clock[0] += 1.0
    assert route(r).body["rerouted_reason"] == "unavailable"  # the probe
    backend.calls.clear()
    assert route(r).body["rerouted_reason"] == "unavailable"  # skipped, flagged as it is now
    assert [v for v, _ in backend.calls] == ["stable"]


def test_a_version_the_status_shows_up_again_takes_failovers_without_a_probe():
    """The stable version tripped while it deployed (Serve's status said no supervisor ran)
    and only the canary's players log in: none of them ever probes stable. Once the status
    shows stable up, a canary login failing over goes there, and so does the next one (the
    probe, taken by the first, would have turned the second away: a 503)."""
    clock = [0.0]
    backend = Backend({"stable": VersionUnavailable("deploying"), "canary": OK})
    breaker = VersionBreaker(trip_after=3, open_s=1.0, clock=lambda: clock[0])
    weights = {"stable": 50, "canary": 50}
    r, _ = router(backend, weights, budget_ms=400, reserve_ms=150, breaker=breaker)
    split = VersionSplit(GAME, ["stable", "canary"], weights)
    of_stable = next(f"p{i}" for i in range(100) if split.assign(f"p{i}") == "stable")
    of_canary = next(f"p{i}" for i in range(100) if split.assign(f"p{i}") == "canary")
    for _ in range(3):
        assert route(r, of_stable).body["rerouted_reason"] == "unavailable"
    assert breaker.is_open("stable")
    clock[0] += 5.0
    backend.behaviour = {"stable": OK, "canary": RuntimeError("every supervisor died")}
    r.version_up("stable")
    backend.calls.clear()
    for _ in range(2):
        reply = route(r, of_canary)
        assert (reply.status, reply.body["version"]) == (200, "stable")
        assert reply.body["rerouted_reason"] == "failed"
    assert [v for v, _ in backend.calls] == ["canary", "stable"] * 2


def test_timeouts_of_logins_with_little_budget_left_do_not_trip_a_version():
    """Under load, logins that arrive with a tight caller deadline time out on a healthy
    version; that must not send the version's players elsewhere."""
    backend = Backend({"canary": "hang", "stable": OK})
    r, _ = router(backend, budget_ms=400, reserve_ms=150)
    for _ in range(5):
        asyncio.run(r.route({"player_id": "p1", "game": GAME, "deadline_ms": 200}, None))
    backend.behaviour["canary"] = OK
    backend.calls.clear()
    assert route(r).body["version"] == "canary"  # still tried first
    assert backend.calls[0][0] == "canary"


def test_an_alternative_whose_breaker_is_open_gets_no_reserve():
    """With the other version skipped, the assigned one gets the whole budget."""
    clock = [0.0]
    backend = Backend({"canary": OK, "stable": OK})
    breaker = VersionBreaker(trip_after=1, open_s=10.0, clock=lambda: clock[0])
    breaker.failed("stable", "timeout")
    r, _ = router(backend, budget_ms=400, reserve_ms=150, breaker=breaker)
    reply = route(r)
    assert reply.status == 200 and reply.body["rerouted_reason"] is None
    assert backend.calls == [("canary", backend.calls[0][1])] and backend.calls[0][1] > 350


FULL = {"status": 503, "detail": "overloaded", "retry_after_s": 3, "replica_full": True}


def known_load(replicas=2, bound=16):
    """A router that has read the canary's running supervisors and their bound."""
    load = VersionLoad(lambda version: replicas)
    load.learn("canary", {"status": 200, "max_in_flight": bound})
    return load


def test_a_full_supervisor_while_the_version_has_room_is_tried_once_more():
    backend = Backend({"canary": [FULL, OK], "stable": OK})
    r, routed = router(backend, load=known_load())
    reply = route(r)
    assert reply.status == 200 and reply.answered == "canary" and reply.reason is None
    assert [version for version, _ in backend.calls] == ["canary", "canary"]
    assert routed == [("canary", "canary", "none")]


def test_full_supervisors_past_the_retries_are_a_refusal_not_a_spill():
    tries = 1 + FULL_REPLICA_RETRIES
    backend = Backend({"canary": [FULL] * tries + [OK], "stable": OK})
    r, routed = router(backend, load=known_load())
    reply = route(r)
    assert reply.status == 503 and reply.retry_after_s == 3
    assert [version for version, _ in backend.calls] == ["canary"] * tries
    assert routed == [("canary", "none", "refused")]


def test_a_full_supervisor_is_not_retried_before_the_versions_room_is_known():
    backend = Backend({"canary": [FULL, OK], "stable": OK})
    r, _ = router(backend, load=VersionLoad(lambda version: None))
    assert route(r).status == 503 and len(backend.calls) == 1


def test_a_version_the_router_already_fills_is_refused_without_a_call():
    gate = asyncio.Event()
    backend = Backend({"canary": gate, "stable": OK})
    r, routed = router(backend, load=known_load(replicas=1, bound=2))

    async def three_logins():
        first = asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None))
        second = asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None))
        for _ in range(10):  # a few turns of the loop: both reach the canary and wait there
            await asyncio.sleep(0)
        assert len(backend.calls) == 2
        third = await r.route({"player_id": "p1", "game": GAME}, None)
        assert len(backend.calls) == 2  # the third never reached the version
        gate.set()
        return [await first, await second, third]

    replies = asyncio.run(three_logins())
    assert [reply.status for reply in replies] == [200, 200, 503]
    assert replies[2].retry_after_s == 2 and "overloaded" in (replies[2].detail or "")
    assert routed.count(("canary", "none", "refused")) == 1


def test_a_login_for_a_version_the_router_fills_waits_for_a_slot_within_its_allowance():
    first_gate, second_gate = asyncio.Event(), asyncio.Event()
    backend = Backend({"canary": [first_gate, second_gate, OK], "stable": OK})
    load = known_load(replicas=1, bound=2)
    r, routed = router(backend, load=load, queue_ms=200)

    async def three_logins():
        logins = [
            asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None)) for _ in range(2)
        ]
        for _ in range(10):
            await asyncio.sleep(0)
        third = asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None))
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(backend.calls) == 2 and load.waiting("canary") == 1  # held in the router
        await asyncio.sleep(0.1)  # it waits at least this long
        first_gate.set()
        answered_first = await logins[0]
        reply = await third  # sent once the first login's slot freed
        second_gate.set()
        return answered_first, reply, await logins[1]

    replies = asyncio.run(three_logins())
    assert [(x.status, x.answered) for x in replies] == [(200, "canary")] * 3
    assert [version for version, _ in backend.calls] == ["canary"] * 3
    # The wait (at least 100 ms) came off the third login's try.
    assert backend.calls[2][1] <= backend.calls[0][1] - 90
    assert routed.count(("canary", "canary", "none")) == 3
    assert load.in_flight("canary") == 0 and load.waiting("canary") == 0


def test_a_login_that_spent_its_allowance_in_the_edge_queue_is_refused_at_once():
    backend = Backend({"canary": OK, "stable": OK})
    load = known_load(replicas=1, bound=1)
    load.enter("canary")
    r, routed = router(backend, load=load, queue_ms=200)
    reply = asyncio.run(r.route({"player_id": "p1", "game": GAME}, None, waited_ms=200.0))
    assert reply.status == 503 and backend.calls == [] and load.waiting("canary") == 0
    assert routed == [("canary", "none", "refused")]


def test_a_wait_that_runs_out_is_a_refusal_not_a_spill():
    # The version stays full: the login is refused after its wait, the failover reserve kept
    # and no other version sent the overload.
    backend = Backend({"canary": OK, "stable": OK})
    load = known_load(replicas=1, bound=1)
    load.enter("canary")
    r, routed = router(backend, load=load, budget_ms=400, reserve_ms=150, queue_ms=30)
    reply = route(r)
    assert reply.status == 503 and reply.retry_after_s == 2 and backend.calls == []
    assert routed == [("canary", "none", "refused")] and load.in_flight("canary") == 1


def test_the_router_meters_every_login_it_holds_over_its_bound():
    # What the router autoscales on: logins in flight through this replica, each for its
    # whole stay (failover and local refusals included), as a share of its edge bound.
    from app.core.load_meter import LoadMeter

    now = [0.0]
    meter = LoadMeter(4, window_s=10.0, clock=lambda: now[0])
    gates = [asyncio.Event(), asyncio.Event()]
    backend = Backend({"canary": list(gates), "stable": OK})  # it pops its list
    split = VersionSplit(GAME, ["stable", "canary"], {"stable": 0, "canary": 1})
    r = OfferRouter(
        split, backend, budget_ms=400, failover_reserve_ms=150, retry_after_s=2, meter=meter
    )

    async def two_logins():
        logins = [
            asyncio.ensure_future(r.route({"player_id": p, "game": GAME}, None))
            for p in ("p1", "p2")
        ]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        held = meter.level
        now[0] = 5.0  # both held for 5 s of the 10 s window
        for gate in gates:
            gate.set()
        replies = await asyncio.gather(*logins)
        return held, replies

    held, replies = asyncio.run(two_logins())
    assert held == 2 and [(x.status, x.answered) for x in replies] == [(200, "canary")] * 2
    assert meter.level == 0
    now[0] = 10.0
    assert meter.utilization() == pytest.approx(2 * 5.0 / 10.0 / 4)


def test_the_meter_lets_go_of_logins_refused_failed_or_abandoned():
    # Whatever way a login leaves the router (refused in the router, every version failing,
    # the caller giving up), it stops counting as held: a stuck level would keep a replica
    # looking busy, and the deployment scaled up, forever.
    from app.core.load_meter import LoadMeter

    meter = LoadMeter(4)

    def metered(backend, load=None):
        split = VersionSplit(GAME, ["stable", "canary"], {"stable": 0, "canary": 1})
        return OfferRouter(
            split,
            backend,
            budget_ms=400,
            failover_reserve_ms=150,
            retry_after_s=2,
            load=load,
            meter=meter,
        )

    full = known_load(replicas=1, bound=1)
    full.enter("canary")  # the router already holds the one login the canary admits
    refused = route(metered(Backend({"canary": OK, "stable": OK}), load=full))
    assert refused.status == 503 and meter.level == 0

    failing = route(metered(Backend({"canary": RuntimeError("x"), "stable": {"status": 500}})))
    assert failing.status == 503 and meter.level == 0

    async def abandoned():
        r = metered(Backend({"canary": "hang", "stable": "hang"}))
        login = asyncio.ensure_future(r.route({"player_id": "p1", "game": GAME}, None))
        await asyncio.sleep(0.01)
        held = meter.level
        login.cancel()
        with pytest.raises(asyncio.CancelledError):
            await login
        return held

    assert asyncio.run(abandoned()) == 1 and meter.level == 0


def test_a_full_supervisor_may_hold_a_login_for_what_is_left_of_its_allowance():
    backend = Backend({"canary": OK, "stable": OK})
    r, _ = router(backend, budget_ms=400, reserve_ms=150, queue_ms=100)
    assert route(r).status == 200
    # The allowance (100 ms): the try's budget (250 ms) leaves room for it, a minimal
    # attempt and the refusal's way back.
    assert backend.waits == [pytest.approx(100, abs=5)]

    spent = Backend({"canary": OK, "stable": OK})
    r, _ = router(spent, budget_ms=400, reserve_ms=150, queue_ms=200)
    reply = asyncio.run(r.route({"player_id": "p1", "game": GAME}, None, waited_ms=250.0))
    assert reply.status == 200 and spent.waits == [0.0]  # spent in HAProxy's queue

    short = Backend({"canary": OK, "stable": OK})
    r, _ = router(short, budget_ms=400, reserve_ms=150, queue_ms=1000)
    assert route(r).status == 200
    # Never into the failover reserve: the try's 250 ms less a minimal attempt, less the
    # time the supervisor's refusal needs to come back before the router stops waiting.
    assert 0 < short.waits[0] <= 250 - MIN_ATTEMPT_MS - SUPERVISOR_REFUSAL_MARGIN_MS

    none = Backend({"canary": OK, "stable": OK})
    r, _ = router(none)  # no allowance: a full supervisor refuses at once, as before
    assert route(r).status == 200 and none.waits == [0.0]


class RecordingLoad(VersionLoad):
    """The router's per-version load, recording each wait it is asked for; `late_s` makes a
    slot come that long after it is asked for (a hand-over the loop resumes late)."""

    def __init__(self, late_s=0.0, **kwargs):
        super().__init__(**kwargs)
        self.asked = []
        self.late_s = late_s

    async def acquire(self, version, wait_s):
        self.asked.append(wait_s)
        if self.late_s:
            self.enter(version)
            await asyncio.sleep(self.late_s)
            return True
        return await super().acquire(version, wait_s)


def test_the_routers_own_wait_never_reaches_into_the_failover_reserve():
    load = RecordingLoad()
    r, _ = router(Backend({"canary": OK, "stable": OK}), load=load, queue_ms=10_000)
    assert route(r).status == 200
    # budget 400 - reserve 150 = 250 for the assigned version, less a minimal attempt
    assert 0 < load.asked[0] <= (250 - MIN_ATTEMPT_MS) / 1000.0


def test_a_slot_that_comes_too_late_to_try_is_given_back_and_the_login_refused():
    load = RecordingLoad(late_s=0.3)  # past the try's 250 ms
    backend = Backend({"canary": OK, "stable": OK})
    r, routed = router(backend, load=load, queue_ms=500)
    reply = route(r)
    assert reply.status == 503 and backend.calls == []  # no try with no budget
    assert load.in_flight("canary") == 0  # the slot went back
    assert routed == [("canary", "none", "refused")]


def test_a_supervisors_wait_comes_off_the_allowance_of_the_next_try():
    class SlowFull(Backend):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            reply = await super().offer(version, payload, request_id, wait_ms)
            if reply.get("replica_full"):
                await asyncio.sleep(0.1)  # the supervisor held it, then its wait ran out
            return reply

    backend = SlowFull({"canary": [FULL, OK], "stable": OK})
    r, _ = router(backend, budget_ms=1000, reserve_ms=250, load=known_load(), queue_ms=150)
    reply = route(r)
    assert reply.status == 200 and [v for v, _ in backend.calls] == ["canary", "canary"]
    assert backend.waits[0] == pytest.approx(150, abs=5)
    # At least 100 ms of the 150 went in the first supervisor.
    assert backend.waits[1] <= 50


def breaker_router(backend, trip_after=1, **kwargs):
    """A router whose budget is far longer than any test: only the breaker, not a timeout,
    can end a try on a silent version."""
    return router(
        backend,
        budget_ms=20_000,
        reserve_ms=1_000,
        breaker=VersionBreaker(trip_after=trip_after, open_s=60.0, quiet_s=0.0),
        **kwargs,
    )


def test_tries_in_flight_on_a_version_stop_waiting_once_its_breaker_opens():
    """Logins already waiting on a version whose supervisors all died would each wait out
    their own share of the budget. When the breaker opens, they go to the next version at
    once, flagged with the breaker's reason, and their calls to the dead version end."""
    fail_first = asyncio.Event()
    both_sent = asyncio.Event()
    cancelled = []

    class DeadCanary(Backend):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            if version == "stable":
                return await super().offer(version, payload, request_id, wait_ms)
            self.calls.append((version, payload["deadline_ms"]))
            if len(self.calls) == 2:
                both_sent.set()
            try:
                if payload["player_id"] == "p1":
                    await fail_first.wait()
                    raise ConnectionError("replica died")
                await asyncio.sleep(60)  # silent: only the budget or the breaker ends it
            except asyncio.CancelledError:
                cancelled.append(payload["player_id"])
                raise

    backend = DeadCanary({"stable": OK})
    r, _ = breaker_router(backend)

    async def scenario():
        first = asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None))
        second = asyncio.create_task(r.route({"player_id": "p2", "game": GAME}, None))
        await both_sent.wait()
        fail_first.set()  # the first try fails: the breaker opens
        # Far shorter than the 19 s the second try would otherwise wait on the canary.
        return await asyncio.wait_for(asyncio.gather(first, second), timeout=10)

    first, second = asyncio.run(scenario())
    assert (first.answered, first.reason) == ("stable", "failed")
    assert (second.answered, second.reason) == ("stable", "failed")
    assert cancelled == ["p2"]  # the second's call to the dead canary was ended
    assert [v for v, _ in backend.calls] == ["canary", "canary", "stable", "stable"]


def test_a_version_whose_breaker_stays_closed_keeps_its_tries_waiting():
    """Failures that do not open the breaker (fewer than trip_after) leave the other tries on
    the version alone: one dead replica's logins must not move its live siblings' logins."""
    sent = asyncio.Event()
    release = asyncio.Event()

    class OneDeadReplica(Backend):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            self.calls.append((version, payload["player_id"]))
            if version == "canary" and payload["player_id"] == "p1":
                raise ConnectionError("replica died")
            if version == "canary":
                sent.set()
                await release.wait()
            return {**OK, "body": {**OK["body"], "version": version}}

    backend = OneDeadReplica({})
    r, _ = breaker_router(backend, trip_after=2)

    async def scenario():
        waiting = asyncio.create_task(r.route({"player_id": "p2", "game": GAME}, None))
        await sent.wait()
        failed = await r.route({"player_id": "p1", "game": GAME}, None)
        release.set()
        return await asyncio.wait_for(waiting, timeout=10), failed

    waiting, failed = asyncio.run(scenario())
    assert (waiting.answered, waiting.reason) == ("canary", None)
    assert (failed.answered, failed.reason) == ("stable", "failed")


def test_a_version_found_down_ends_the_tries_held_on_it_at_once():
    """The first login after every supervisor died is held by the handle (it routed to a
    dead replica); the next finds the handle sees none (VersionUnavailable). That alone
    opens the breaker, with trip_after 3 and the quiet time not over (the version answered
    a moment ago): the held try goes to the other version at once."""
    held_sent = asyncio.Event()
    clock = [0.0]

    class HandleSawThemDie(Backend):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            if version == "stable":
                return await super().offer(version, payload, request_id, wait_ms)
            self.calls.append((version, payload["deadline_ms"]))
            if payload["player_id"] == "p1":
                held_sent.set()
                await asyncio.sleep(60)  # held until a replacement runs
            raise VersionUnavailable("every supervisor this router knew died")

    backend = HandleSawThemDie({"stable": OK})
    breaker = VersionBreaker(trip_after=3, open_s=60.0, quiet_s=0.5, clock=lambda: clock[0])
    breaker.succeeded("canary")  # it answered just now: the quiet time has not passed
    r, _ = router(backend, budget_ms=20_000, reserve_ms=1_000, breaker=breaker)

    async def scenario():
        held = asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None))
        await held_sent.wait()
        found_down = await r.route({"player_id": "p2", "game": GAME}, None)
        return await asyncio.wait_for(held, timeout=10), found_down

    held, found_down = asyncio.run(scenario())
    assert (found_down.answered, found_down.reason) == ("stable", "unavailable")
    # Not the 19 s its try had on the canary: the breaker opened on the one unavailable.
    assert (held.answered, held.reason) == ("stable", "unavailable")
    assert breaker.is_open("canary")


def test_a_login_waiting_for_a_slot_skips_a_version_whose_breaker_opened_meanwhile():
    """The version is full for this router, so the second login waits for a slot. The
    first login's try fails and opens the breaker; the slot it gives back must not send the
    waiting login to the dead version to wait out its own share there."""
    fail = asyncio.Event()
    first_sent = asyncio.Event()

    class DeadCanary(Backend):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            if version == "stable":
                return await super().offer(version, payload, request_id, wait_ms)
            self.calls.append((version, payload["player_id"]))
            if payload["player_id"] == "p1":
                first_sent.set()
                await fail.wait()
                raise ConnectionError("replica died")
            await asyncio.sleep(60)  # silent

    backend = DeadCanary({"stable": OK})
    r, _ = breaker_router(backend, load=known_load(replicas=1, bound=1), queue_ms=15_000)

    async def scenario():
        first = asyncio.create_task(r.route({"player_id": "p1", "game": GAME}, None))
        await first_sent.wait()
        second = asyncio.create_task(r.route({"player_id": "p2", "game": GAME}, None))
        await asyncio.sleep(0)  # p2 is waiting for the canary's one slot
        fail.set()
        return await asyncio.wait_for(asyncio.gather(first, second), timeout=10)

    first, second = asyncio.run(scenario())
    assert (first.answered, first.reason) == ("stable", "failed")
    assert (second.answered, second.reason) == ("stable", "failed")
    assert [c for c in backend.calls if c[0] == "canary"] == [("canary", "p1")]


def test_logins_due_a_tripped_versions_probe_do_not_all_wait_for_its_slot():
    """The canary tripped and its probe is due, and this router holds as many logins on it
    as it takes (a silent try keeps its slot). One login takes the probe and waits for the
    slot; the others, ordered while the probe was due, skip the canary at once instead of
    each waiting out its allowance for a dead version's slot."""
    clock = [0.0]
    backend = Backend({"canary": OK, "stable": OK})
    breaker = VersionBreaker(trip_after=1, open_s=1.0, quiet_s=0.0, clock=lambda: clock[0])
    load = known_load(replicas=1, bound=1)
    load.enter("canary")  # the one slot, held
    r, _ = router(backend, breaker=breaker, load=load, budget_ms=20_000, queue_ms=15_000)
    breaker.failed("canary", "timeout")
    clock[0] += 1.0  # the probe is due

    async def scenario():
        logins = [
            asyncio.create_task(r.route({"player_id": f"p{i}", "game": GAME}, None))
            for i in range(3)
        ]
        for _ in range(20):  # every login ordered its tries and got as far as it can
            await asyncio.sleep(0)
        done = [t for t in logins if t.done()]
        waiting = load.waiting("canary")
        load.leave("canary")  # the slot comes back: the probe goes out
        await asyncio.gather(*logins)
        return [t.result() for t in done], waiting

    answered, waiting = asyncio.run(scenario())
    assert waiting == 1  # only the probe waits for the canary's slot
    assert [(a.answered, a.reason) for a in answered] == [("stable", "timeout")] * 2


class LateCanary(Backend):
    """The assigned canary stays silent past its share and answers once the router has sent
    the login on to stable (ordered by events, not by time); stable behaves as given."""

    def __init__(self, stable, canary_reply=None):
        super().__init__({"stable": stable})
        self.canary_reply = canary_reply or OK
        self.stable_called = asyncio.Event()
        self.cancelled = []

    async def offer(self, version, payload, request_id, wait_ms=0.0):
        if version == "stable":
            self.stable_called.set()
            return await super().offer(version, payload, request_id, wait_ms)
        self.calls.append((version, payload["deadline_ms"]))
        try:
            await self.stable_called.wait()
            await asyncio.sleep(0)  # stable's try is now the one waited on
            return {**self.canary_reply, "body": {"offer": "x", "version": version}}
        except asyncio.CancelledError:
            self.cancelled.append(version)
            raise


def test_a_silent_versions_answer_within_the_budget_is_taken_over_a_silent_alternative():
    """The assigned version misses its share (a host too busy to answer in time) and the
    login goes on to the other version, which is silent too: the assigned version's answer,
    coming while the login still has budget, is the answer, not a 503 at the budget."""
    backend = LateCanary(stable="hang")
    load = known_load()
    r, routed = router(backend, load=load)
    reply = route(r)
    assert (reply.status, reply.answered, reply.reason) == (200, "canary", None)
    assert reply.body["rerouted_reason"] is None and reply.body["version"] == "canary"
    assert [v for v, _ in backend.calls] == ["canary", "stable"]
    assert routed == [("canary", "canary", "none")]
    assert load.in_flight("canary") == 0 and load.in_flight("stable") == 0


def test_a_silent_versions_late_answer_is_waited_for_when_no_other_version_can_answer():
    """The other version is unavailable at once: the router does not refuse while the
    silent version still has budget to answer in."""

    class Unavailable(LateCanary):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            if version == "stable":
                self.calls.append((version, payload["deadline_ms"]))
                self.stable_called.set()
                raise VersionUnavailable("stable: no running supervisor")
            return await super().offer(version, payload, request_id, wait_ms)

    backend = Unavailable(stable=None)
    r, _ = router(backend)
    reply = route(r)
    assert (reply.status, reply.answered, reply.reason) == (200, "canary", None)


def test_the_alternatives_answer_wins_over_a_silent_version_and_ends_its_call():
    backend = Backend({"canary": "hang", "stable": OK})
    cancelled = []

    class Watched(Backend):
        async def offer(self, version, payload, request_id, wait_ms=0.0):
            try:
                return await backend.offer(version, payload, request_id, wait_ms)
            except asyncio.CancelledError:
                cancelled.append(version)
                raise

    load = known_load()
    r, _ = router(Watched({}), load=load)
    reply = route(r)
    assert (reply.status, reply.answered, reply.reason) == (200, "stable", "timeout")
    assert cancelled == ["canary"]  # the silent try ended with the login
    assert load.in_flight("canary") == 0


def test_a_late_refusal_is_not_an_answer():
    """A silent version that ends with a 503 after its share: the login is already on the
    other version, so that refusal is dropped and the login still gets a fallback answer
    of its own (here a 503 from the router when the other version is silent too)."""
    backend = LateCanary(stable="hang", canary_reply={"status": 503, "detail": "busy"})
    r, routed = router(backend)
    reply = route(r)
    assert reply.status == 503 and reply.reason == "timeout"
    assert routed == [("canary", "none", "timeout")]
