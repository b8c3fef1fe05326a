"""Faults against the real deployment: every request ends, within its deadline, never a 5xx.

The chaos tests each run a short locust load while the fault happens: a killed member
replica, a stopped feature store, a slow member. The others: client disconnect, overload.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from app.config.settings import Settings
from app.local.dynalite import Dynalite
from app.local.seeding import ensure_table, seed_game
from loadtest.harness.locust_runner import LoadResult, LoadTarget, run_locust
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE
from tests.integration.conftest import (
    APP_NAME,
    app_args,
    deploy,
    reconfigure,
    replica_actor_names,
    slow_members,
    undeploy,
)
from tests.support import answered_per_s, wait_until

pytestmark = pytest.mark.integration

BUDGET_MS = 1000  # the integration app's request_budget_ms (the builder default)
SLACK_MS = 500  # proxy, HTTP and scheduling on a loaded 2-core runner
SLOW_MEMBER = "hgb-w1"  # weight 0.24 of 1.0: the rest still make the 0.5 quorum


def offer(base: str, pid: str, headers: dict | None = None, **extra) -> requests.Response:
    return requests.post(
        f"{base}/v1/offers",
        json={"player_id": pid, "game": TEST_GAME, **extra},
        headers=headers,
        timeout=10,
    )


# The locust load the tests below run beside a fault: 10 game servers sending a share of
# what the application answers on this host (measured once, before any fault), at most the
# 20 logins/s these tests ran at before. At a fixed 20/s a host twice slower had more to
# answer than it could: logins ran past the budget and the supervisor's admission refused
# some, whatever the fault (2026-11-28, a one-core cgroup). A slower host gets fewer logins
# per second, never a looser check. A third leaves room for the Prober's logins and for
# what the fault itself costs (a store restarting, a replica starting).
LOAD_USERS = 10
LOAD_MAX_RATE = 20.0
LOAD_SHARE_OF_MEASURED = 1 / 3
LOAD_PROBE_CALLERS = 4


@pytest.fixture(scope="module")
def load_rate(serve_app) -> float:
    """Logins/s of the background load (module-scoped: measured before a class's fault)."""
    capacity = answered_per_s(serve_app, TEST_GAME, TEST_PLAYERS, LOAD_PROBE_CALLERS)
    rate = min(LOAD_MAX_RATE, LOAD_SHARE_OF_MEASURED * capacity)
    print(f"answered {capacity:.0f}/s: background load {rate:.1f} logins/s")
    return rate


@dataclass
class BackgroundLoad:
    """A short locust run in a thread, at `rate` logins/s for `seconds`; result() waits."""

    base: str
    out: Path
    rate: float
    seconds: int
    # How long the fault makes every answer take, when it does (a slow member: the budget).
    answer_s: float = 0.0

    def __post_init__(self) -> None:
        url = urlsplit(self.base)
        target = LoadTarget(url.port, url.path, TEST_GAME, TEST_PLAYERS)
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._future = self._pool.submit(
            run_locust,
            target,
            self.out,
            users=LOAD_USERS,
            user_rps=self.rate / LOAD_USERS,
            run_time_s=self.seconds,
            extra_args=["--late-after-ms", str(BUDGET_MS + SLACK_MS)],
        )

    def __enter__(self) -> BackgroundLoad:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def result(self) -> LoadResult:
        return self._future.result()

    def planned_logins(self) -> float:
        """What the users send in `seconds`: each waits for its answer (answer_s), then a
        mean 1 / user_rps. At answer_s = 0 that is rate x seconds. A class whose every login
        takes the 1000 ms budget gets about half of it at rate 9 and a third at rate 20, so
        measuring it against rate x seconds failed on any host answering over 30/s and by
        chance below (2026-11-28, CI: 41 of 45 at rate 9)."""
        mean_wait_s = LOAD_USERS / self.rate
        return LOAD_USERS * self.seconds / (mean_wait_s + self.answer_s)

    def assert_every_request_ended_in_time(self) -> None:
        result = self.result()
        responses = result.outcomes["responses"]
        # The load ran: at least half of what its users would send at this answer time.
        assert result.requests >= self.planned_logins() / 2, result
        assert responses["no_answer"] == 0, result.outcomes
        assert responses["http_5xx"] == 0, result.outcomes
        assert responses["late"] == 0, result.outcomes
        assert result.outcomes["unexpected"] == 0, result.outcomes


@dataclass(frozen=True)
class Answer:
    sent: float  # time.monotonic() when the request was sent
    received: float
    status: int
    body: dict


class Prober:
    """A few threads posting logins, each `pause_s` after its last answer, keeping every
    answer with its timing. A sampler, not load: back to back, three threads asked more of
    the service than the test's locust load (a fallback answers in a few ms, and they sent
    the next at once), and on a host twice slower the logins they kept in flight piled up
    past the budget (2026-11-28: 5 late and a 503 in a one-core cgroup)."""

    def __init__(self, base: str, threads: int = 3, pause_s: float = 0.2) -> None:
        self.base = base
        self.pause_s = pause_s
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(threads)
        ]

    def _loop(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            response = offer(self.base, player_id(40 + (n * 50 + i) % 200))
            answer = Answer(sent, time.monotonic(), response.status_code, response.json())
            with self._lock:
                self.answers.append(answer)
            i += 1
            self._stop.wait(self.pause_s)

    def __enter__(self) -> Prober:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def between(self, start: float, end: float) -> list[Answer]:
        """Answers to requests sent after `start` and answered before `end`."""
        return [a for a in self.answers if a.sent >= start and a.received <= end]


def member_handle(name: str):
    from ray import serve

    return serve.get_deployment_handle(f"member-{name}", app_name=APP_NAME)


@pytest.fixture(scope="class")
def slow_member(serve_app):
    """SLOW_MEMBER sleeps 3 s per request (a live fault) for the tests of one class, then
    recovers. No straggler grace: these tests are about the budget and the caller's deadline."""
    reconfigure(slow_members({SLOW_MEMBER: 3000}, supervisor={"straggler_grace_ms": None}))
    try:
        yield SLOW_MEMBER
    finally:
        reconfigure({})


@pytest.fixture
def slow_member_long_budget(serve_app):
    """SLOW_MEMBER sleeps 3 s within a 5 s budget: only a disconnect cancels it early."""
    knobs = {"request_budget_ms": 5000, "straggler_grace_ms": None}
    reconfigure(slow_members({SLOW_MEMBER: 3000}, supervisor=knobs))
    try:
        yield SLOW_MEMBER
    finally:
        reconfigure({})


def test_client_disconnect_cancels_member_work(serve_app, slow_member_long_budget):
    slow_member = slow_member_long_budget
    url = urlsplit(serve_app)
    before = member_handle(slow_member).fault_counts.remote().result().get("cancelled", 0)
    body = f'{{"player_id": "{player_id(1)}", "game": "{TEST_GAME}"}}'.encode()
    request = (
        f"POST {url.path}/v1/offers HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((url.hostname, url.port), timeout=5) as client:
        client.sendall(request)
        time.sleep(0.5)  # the member is now sleeping in its injected delay
    # Closed after 0.5 s: neither the 3 s delay nor the 5 s budget has run out.

    def cancelled() -> bool:
        counts = member_handle(slow_member).fault_counts.remote().result()
        return counts.get("cancelled", 0) > before

    # Only a cancellation counts here: the 3 s delay would end on its own well inside the 5 s
    # budget, so neither finishing nor the deadline can produce it.
    wait_until(cancelled, "cancelled", 5.0)


class TestWithASlowMember:
    """SLOW_MEMBER answers after 3 s, beyond the budget, in every test of this class."""

    def test_slow_member_is_left_out_and_the_rest_aggregated(
        self, serve_app, load_rate, slow_member, tmp_path
    ):
        # No straggler grace here: every login waits the budget for the slow member.
        load = BackgroundLoad(
            serve_app, tmp_path / "locust", load_rate, seconds=10, answer_s=BUDGET_MS / 1000
        )
        with load:
            time.sleep(3)
            body = offer(serve_app, player_id(3)).json()
            load.result()
        assert body["personalized"] is True
        assert slow_member not in body["answered_members"]
        assert body["missing_members"] == {slow_member: "timeout"}
        assert body["members_answered"] == 3
        assert body["timings"]["total_ms"] < BUDGET_MS + 100
        load.assert_every_request_ended_in_time()

    def test_caller_deadline_bounds_the_wait_for_a_slow_member(self, serve_app, slow_member):
        body = offer(serve_app, player_id(4), deadline_ms=200).json()
        assert body["missing_members"] == {slow_member: "timeout"}
        # Answered at the caller's 200 ms, not at the app's 1000 ms budget (measured inside the
        # supervisor, so a loaded test host's scheduling does not blur the two; no straggler
        # grace in this fixture, so only the deadline can end the wait before 1000 ms).
        assert body["timings"]["total_ms"] < BUDGET_MS


def test_straggler_grace_answers_without_a_stuck_member_long_before_the_budget(serve_app):
    """The shipped default: once the quorum answered, a member that is still busy (here 3 s
    of injected delay, as a replica on a lost node would be) gets 150 ms more, not the
    whole budget."""
    reconfigure(slow_members({SLOW_MEMBER: 3000}))
    try:
        body = offer(serve_app, player_id(5)).json()
    finally:
        reconfigure({})
    assert body["personalized"] is True
    assert body["missing_members"] == {SLOW_MEMBER: "timeout"}
    # Without the grace this login would end at the 1000 ms budget, by construction.
    assert body["timings"]["total_ms"] < BUDGET_MS


def test_killed_member_replica_neither_hangs_nor_fails_requests_and_rejoins(
    serve_app, load_rate, tmp_path
):
    import ray

    victim = "xgb-ios"
    [name] = replica_actor_names(APP_NAME, f"member-{victim}")
    load = BackgroundLoad(serve_app, tmp_path / "locust", load_rate, seconds=12)
    with load, Prober(serve_app) as prober:
        time.sleep(3)
        killed = time.monotonic()
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
        load.result()
    load.assert_every_request_ended_in_time()
    # The traffic did meet the dead replica: answers after the kill left the member out
    # (failed call or timeout), and none of them was an error.
    after = prober.between(killed, float("inf"))
    assert after and all(a.status == 200 for a in after)
    assert any(victim in a.body["missing_members"] for a in after), [
        a.body["missing_members"] for a in after
    ]

    # Serve replaces the replica; the member answers in the ensemble again.
    def rejoined() -> bool:
        body = offer(serve_app, player_id(5)).json()
        return victim in body["answered_members"]

    wait_until(rejoined, f"{victim} answering again", 60.0)
    assert replica_actor_names(APP_NAME, f"member-{victim}") != {name}


def test_a_handle_sees_no_supervisor_once_a_call_met_the_dead_one(serve_app):
    """What the game router fails over on while Serve's status still says RUNNING
    (app.serving.router.replicas_the_handle_sees), against live Serve: the replicas a handle
    would send to, read from Serve's private router state. A call sent after the version's
    only supervisor was killed meets the dead replica: from then the handle sees none, and
    holds the call until the replacement runs (what the router no longer waits for)."""
    import ray
    from ray import serve

    from app.serving.router import replicas_the_handle_sees

    handle = serve.get_deployment_handle("supervisor", APP_NAME)
    login = {"player_id": player_id(6), "game": TEST_GAME}
    assert replicas_the_handle_sees(handle) is None  # no call through it yet

    def route() -> dict:
        return handle.route_offer.remote(login, None, 0.0, time.time()).result(timeout_s=60)

    assert route()["status"] == 200
    assert replicas_the_handle_sees(handle) == 1
    [name] = replica_actor_names(APP_NAME, "supervisor")
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    sent = time.monotonic()
    held = handle.route_offer.remote(login, None, 0.0, time.time())
    wait_until(lambda: replicas_the_handle_sees(handle) == 0, "the handle seeing none", 30.0, 0.01)
    # The handle held the call past its budget, until the replacement ran: the replacement
    # refuses it as too late, and the handle sees the replacement.
    answer = held.result(timeout_s=60)
    assert time.monotonic() - sent > BUDGET_MS / 1000
    assert answer["status"] == 503, answer
    assert replicas_the_handle_sees(handle) == 1
    assert replica_actor_names(APP_NAME, "supervisor") != {name}
    wait_until(lambda: offer(serve_app, player_id(7)).status_code == 200, "the route", 60.0)


def test_feature_store_outage_gives_flagged_fallbacks_then_recovers(
    serve_app, load_rate, dynalite_server, tmp_path
):
    load = BackgroundLoad(serve_app, tmp_path / "locust", load_rate, seconds=15)
    with load, Prober(serve_app) as prober:
        time.sleep(3)
        dynalite_server.stop()
        down = time.monotonic()  # the store's process is gone from here on
        try:
            time.sleep(4)
        finally:
            back = time.monotonic()  # ... until here (at the earliest)
            restart_store(dynalite_server, niceness=Settings().replica_niceness)
        load.result()
    # Every answer given while the store was down (the feature cache is off here) is the
    # flagged fallback, and none is an error or late.
    during = prober.between(down, back)
    assert len(during) >= 10
    assert all(a.status == 200 for a in during)
    assert {a.body["fallback_reason"] for a in during} == {"feature_store_unavailable"}
    assert all(a.received - a.sent < (BUDGET_MS + SLACK_MS) / 1000 for a in during)
    load.assert_every_request_ended_in_time()

    # The session's store at the tests' priority again (after the timed part: a second
    # outage of a few seconds). Then, with no restart of the service, the breaker lets a
    # trial read through and answers are personalized again.
    dynalite_server.stop()
    restart_store(dynalite_server)
    wait_until(lambda: offer(serve_app, player_id(31)).json()["personalized"], "personalized", 30.0)


def restart_store(server: Dynalite, niceness: int = 0) -> None:
    """Starts the stopped in-memory store and seeds it again (it comes back empty), at
    `niceness` when it is given. In production the store comes back on machines of its own;
    here it shares the host's cores with the replicas, and node's start and the writes of
    600 players at niceness 0 outranked the replicas at 19 by 68 to 1. On a slow host the
    logins of those seconds ran past the budget or were refused by the supervisor's
    admission (2026-11-28, CI's one 503 and a one-core cgroup's late answers, at the very
    moment of the restart). A thread of its own: Linux keeps a niceness per thread, and a
    child process starts at the niceness of the thread that started it."""

    def restart() -> None:
        if niceness:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
        server.start()
        client = server.client(timeout_s=10.0)
        ensure_table(client, TEST_TABLE)
        seed_game(client, TEST_TABLE, TEST_GAME, TEST_PLAYERS)

    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(restart).result()


def test_overload_is_refused_with_503_and_retry_after(serve_app, tiny_version_dir):
    """A tiny second application admits 2 logins at once; the rest are refused on arrival."""
    prefix = "/overload-test"
    args = app_args(
        tiny_version_dir,
        layout={"groups": 1},
        admission={"max_in_flight": 2},
        # Serve itself never holds or refuses these 12: every refusal is the gate's.
        supervisor={"max_ongoing_requests": 64, "max_queued_requests": 16},
        # 800 ms (inside the 1000 ms budget): an admitted login takes that long at least,
        # a refusal none of it, so the order below holds with room for a loaded host (at
        # 400 ms one CI run saw a refusal come back after 0.69 s and the first admitted
        # login after 0.53 s).
        faults={"slow_members_ms": {m: 800 for m in ("xgb-all", "hgb-w1")}},
        retry_after_s=2,
    )
    deploy(args, name="overload-test", route_prefix=prefix)
    base = serve_app.replace(urlsplit(serve_app).path, prefix)

    def timed(i: int) -> tuple[float, requests.Response]:
        started = time.monotonic()
        response = offer(base, player_id(i))
        return time.monotonic() - started, response

    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            answers = list(pool.map(timed, range(12)))
        statuses = sorted(r.status_code for _, r in answers)
        assert set(statuses) == {200, 503}, statuses
        assert statuses.count(200) >= 2
        refused = [(t, r) for t, r in answers if r.status_code == 503]
        accepted = [t for t, r in answers if r.status_code == 200]
        assert all(r.headers.get("Retry-After") == "2" for _, r in refused)
        assert all("overloaded" in r.json()["detail"] for _, r in refused)
        # Refused on arrival: every refusal is back before any admitted login, which waits
        # for the members' 800 ms.
        assert max(t for t, _ in refused) < min(accepted)
    finally:
        undeploy("overload-test")


def test_the_budget_runs_from_the_front_proxy_stamp(serve_app):
    """X-Request-Start (a front proxy's arrival time) counts against the budget."""
    waited_s = 0.6
    response = offer(
        serve_app,
        player_id(3),
        headers={"X-Request-Start": f"t={time.time() - waited_s:.6f}"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    # total_ms is measured from the stamp, so it includes the 600 ms spent before us.
    assert body["timings"]["total_ms"] >= waited_s * 1000
    assert body["timings"]["total_ms"] < BUDGET_MS + SLACK_MS

    late = offer(serve_app, player_id(3), headers={"X-Request-Start": f"t={time.time() - 1.5:.6f}"})
    assert late.status_code == 503
    assert late.headers["Retry-After"] == "1"
    assert "waited" in late.json()["detail"]
