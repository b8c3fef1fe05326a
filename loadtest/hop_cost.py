"""What one Serve hop costs in CPU: the figure the layout planner weighs a member's predict
against (app.config.app_args.HOP_CPU_MS, layout.hop_cpu_ms).

    .venv/bin/python -m loadtest.hop_cost --rounds 3

Starts a one-node Ray with Serve's process settings (app.config.ray_env), deploys a caller
and a callee deployment as small as the service's (fractional num_cpus, one replica each),
and has the caller make sequential handle calls carrying one login's candidate matrix
(10 x 40 float32) to a callee that returns one row of scores, as a member does. The CPU of
every process of the Ray session (the study's process tree: GCS, raylet, controller,
replicas) is counted over the calls, less the session's idle CPU rate measured just before,
and divided by the calls. Rounds alternate sequential calls and `--concurrency` calls at
once (a fan-out's hops overlap). Prints medians with their min-max, writes
loadtest/results/<timestamp>-hop/hop.json.

`--payload login` measures the other hop instead, a game router's call to a version's
supervisor (`route_offer`): a login's body, its request id and wait as the arguments, an
offer's answer (a dict of ~20 fields, the shape of docs/api.md's example) as the reply.

`--serializations cloudpickle,pickle` measures the hop with each of the handle's
`request_serialization` / `response_serialization` in turn, interleaved within every round.
Under the service's process settings (`RAY_SERVE_THROUGHPUT_OPTIMIZED`) a handle call goes
over Serve's gRPC transport, which serializes the arguments and the reply with these
(cloudpickle by default). msgpack and orjson are not candidates: neither carries a numpy
array as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

from app.config.ray_env import ray_node_env
from app.local.ray_auth import ray_auth_env
from loadtest.harness.resources import tree_cpu_seconds
from loadtest.harness.results import Study, spread

STUDY = Study("loadtest.hop_cost", __doc__, "hop-cost")
log = STUDY.log
ROWS, WIDTH = 10, 40
IDLE_S = 5.0
DEFAULT_SERIALIZATION = "cloudpickle"  # Serve's default for both directions
PAYLOADS = ("matrix", "login")
# A routed login's answer, as a supervisor returns it to the router (docs/api.md's example).
ANSWER: dict[str, Any] = {
    "request_id": "b3b8832c-af41-4db6-b287-2a1621f0c6e1",
    "game": "galaxy-raiders",
    "ensemble_version": "2026-10",
    "offer": {
        "offer_id": "gr-mega-bundle",
        "item": "Admiral's Mega Bundle",
        "price": 49.99,
        "discount": 0.4,
        "net_price": 29.99,
    },
    "propensity": 0.019854766472035247,
    "expected_revenue": 0.5955238655622253,
    "personalized": True,
    "fallback_reason": None,
    "tier": "online",
    "members_answered": 12,
    "members_total": 12,
    "answered_members": [
        "xgb-all", "xgb-w0", "xgb-w2", "xgb-w3", "xgb-boot1", "xgb-boot2", "xgb-ios",
        "xgb-android", "xgb-spenders", "hgb-w1", "et-boot3", "logreg-all",
    ],
    "missing_members": {},
    "timings": {"features_ms": 7.111, "fanout_ms": 17.546, "total_ms": 24.968},
}  # fmt: skip
SERIALIZATIONS = ("cloudpickle", "pickle")


def deploy() -> Any:
    """The caller's handle; Ray and Serve started with the service's settings."""
    import numpy as np
    import ray
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
    class Callee:
        async def score(self, matrix: np.ndarray) -> np.ndarray:
            return np.zeros((1, matrix.shape[0]))

        async def route_offer(
            self, payload: dict[str, Any], request_id: str | None, wait_ms: float
        ) -> dict[str, Any]:
            return {**ANSWER, "request_id": request_id, "game": payload["game"]}

    @serve.deployment(ray_actor_options={"num_cpus": 0.1})
    class Caller:
        def __init__(self, callee: Any) -> None:
            self._callee = callee
            self._matrix = np.random.default_rng(0).random((ROWS, WIDTH), dtype=np.float32)

        def transport(self) -> str:
            """How this replica's handle calls travel: the serializations act on gRPC only."""
            from ray.serve._private import constants

            return "grpc" if constants.RAY_SERVE_USE_GRPC_BY_DEFAULT else "actor"

        async def calls(self, n: int, concurrency: int, serialization: str, payload: str) -> float:
            import asyncio

            callee = self._callee.options(
                request_serialization=serialization, response_serialization=serialization
            )

            def call() -> Any:
                if payload == "login":
                    login = {"game": "galaxy-raiders", "player_id": "p0000042"}
                    return callee.route_offer.remote(login, "b3b8832c-af41-4db6", 250.0)
                return callee.score.remote(self._matrix)

            started = time.perf_counter()
            for _ in range(n // concurrency):
                await asyncio.gather(*(call() for _ in range(concurrency)))
            return time.perf_counter() - started

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    return serve.run(Caller.bind(Callee.bind()), name="hop-cost", route_prefix=None)


async def measure(
    caller: Any, calls: int, concurrency: int, serialization: str, payload: str
) -> dict[str, float]:
    me = os.getpid()
    cpu0 = tree_cpu_seconds(me)
    await asyncio.sleep(IDLE_S)
    idle_rate = (tree_cpu_seconds(me) - cpu0) / IDLE_S
    cpu1, t1 = tree_cpu_seconds(me), time.monotonic()
    await caller.calls.remote(calls, concurrency, serialization, payload)
    cpu, wall = tree_cpu_seconds(me) - cpu1, time.monotonic() - t1
    return {
        "cpu_ms_per_call": (cpu - idle_rate * wall) * 1000.0 / calls,
        "wall_ms_per_call": wall * 1000.0 / calls,
        "idle_cpu_rate": idle_rate,
    }


async def measure_rounds(
    caller: Any, args: argparse.Namespace
) -> dict[str, list[dict[str, float]]]:
    """Per "<kind>" (the default serialization) or "<kind>/<serialization>": one entry
    per round, the variants interleaved within each round."""
    # Serve's process settings run a handle's router on the caller's event loop: every call
    # from this driver is made from one loop.
    for serialization in args.serializations:
        await caller.calls.remote(200, 1, serialization, args.payload)  # warm: handles, gRPC
    log(f"handle calls travel over: {await caller.transport.remote()}")
    rounds: dict[str, list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for serialization in args.serializations:
            for kind, concurrency in (("sequential", 1), ("concurrent", args.concurrency)):
                key = (
                    kind
                    if args.serializations == [DEFAULT_SERIALIZATION]
                    else (f"{kind}/{serialization}")
                )
                measured = await measure(
                    caller, args.calls, concurrency, serialization, args.payload
                )
                rounds.setdefault(key, []).append(measured)
                log(f"round {r + 1} {key}: {measured}")
    return rounds


def run(args: argparse.Namespace) -> Path:
    os.environ.update(ray_node_env())
    os.environ.update(ray_auth_env())
    folder = STUDY.folder("hop")
    caller = deploy()
    try:
        rounds = asyncio.run(measure_rounds(caller, args))
    finally:
        import ray

        # Stops the session ray.init started (Serve's controller and replicas with it); the
        # handle's loop is gone, so serve.shutdown() could not reach the controller from here.
        ray.shutdown()
    report = {
        "command": args.command,
        "calls": args.calls,
        "concurrency": args.concurrency,
        "serializations": args.serializations,
        "payload": args.payload,
        "rounds": rounds,
        "cpu_ms_per_call": {
            k: spread([x["cpu_ms_per_call"] for x in v]) for k, v in rounds.items()
        },
        "wall_ms_per_call": {
            k: spread([x["wall_ms_per_call"] for x in v]) for k, v in rounds.items()
        },
    }
    STUDY.save(folder, "hop.json", report)
    for kind in rounds:
        cpu = [x["cpu_ms_per_call"] for x in rounds[kind]]
        log(
            f"{kind}: {statistics.median(cpu):.2f} CPU-ms per hop "
            f"[{min(cpu):.2f}-{max(cpu):.2f}] over {len(cpu)} rounds"
        )
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser(rounds=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--payload",
        choices=PAYLOADS,
        default="matrix",
        help="matrix: a member hop (a login's candidate matrix, scores back); login: a game "
        "router's hop to a supervisor (a login's body, an offer back)",
    )
    parser.add_argument(
        "--serializations",
        type=lambda v: v.split(","),
        default=[DEFAULT_SERIALIZATION],
        help="comma-separated handle serializations to compare (cloudpickle, pickle)",
    )
    args = STUDY.parse(parser, argv)
    unknown = set(args.serializations) - set(SERIALIZATIONS)
    if unknown:
        parser.error(f"--serializations: {sorted(unknown)} not among {list(SERIALIZATIONS)}")
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
