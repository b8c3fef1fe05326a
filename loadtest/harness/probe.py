"""Concurrency-1 latency probe: one keep-alive connection, one request at a time."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.population import player_id


@dataclass(frozen=True)
class ProbeResult:
    requests: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def latency_probe(
    port: int,
    route_prefix: str,
    game: str,
    players: int,
    requests: int = 300,
    warmup: int = 30,
    think_s: float = 0.0,
    player_ids: Sequence[int] | None = None,
) -> ProbeResult:
    """Time `requests` sequential logins of seeded players (after `warmup` untimed ones),
    `think_s` apart (0: back to back, the bench's c=1). The players are drawn at random from
    the first `players` (the same draw every time), or are `player_ids`, one per login, for
    probes that must not meet each other's players in a feature cache."""
    if player_ids is None:
        rng = np.random.default_rng(7)
        player_ids = [int(rng.integers(players)) for _ in range(warmup + requests)]
    if len(player_ids) != warmup + requests:
        raise ValueError(f"{len(player_ids)} player ids for {warmup + requests} logins")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    try:
        for i, player in enumerate(player_ids):
            if think_s > 0 and i > 0:
                time.sleep(think_s)
            body = json.dumps({"player_id": player_id(player), "game": game})
            started = time.perf_counter()
            connection.request("POST", f"{route_prefix}/v1/offers", body, headers)
            response = connection.getresponse()
            response.read()
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            if i < warmup:
                continue
            if response.status != 200:
                errors += 1
            latencies.append(elapsed_ms)
    finally:
        connection.close()
    p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
    return ProbeResult(requests, errors, float(p50), float(p95), float(p99))
