"""Autoscaling on the utilization signal, in real Serve: a burst of logins (coalesced by the
supervisor into one fan-out at a time, so Serve's ongoing-request count stays at 1 per member
replica) raises the member deployment above its minimum; it comes back down once the burst
stops. The game router scales on the logins it holds over its edge bound the same way.
Order is asserted, not timing: generous deadlines on a loaded host.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from models.population import player_id
from tests.integration.conftest import (
    app_args,
    deploy,
    deploy_router_over,
    replica_actor_names,
    undeploy,
)
from tests.integration.serving.test_reliability import SLOW_MEMBER, offer
from tests.support import wait_until

pytestmark = pytest.mark.integration

APP = "autoscale-test"
MEMBERS = "member-group-0"
# Fast reports and short delays for a test; the target is low so that the tiny models'
# few milliseconds of scoring per round are "load", and an idle replica is far below it.
SCALING = {
    "min_replicas": 1,
    "max_replicas": 3,
    "signal": "utilization",
    "target_utilization": 0.05,
    "upscale_delay_s": 1.0,
    "downscale_delay_s": 5.0,
    "metrics_interval_s": 0.5,
    "look_back_period_s": 2.0,
}


def login_loop(base: str, i: int, stop: threading.Event, statuses: list[int]) -> None:
    """One closed-loop client, each on its own walk over the test players, until `stop`."""
    n = 0
    while not stop.is_set():
        statuses.append(offer(base, player_id(1 + (i * 97 + n) % 500)).status_code)
        n += 1


def test_a_burst_scales_the_members_up_and_they_come_back_down(serve_app, tiny_version_dir):
    args = app_args(
        tiny_version_dir,
        layout={"groups": 1},
        members={"num_cpus": 0.05, "autoscaling": SCALING},
        coalescing={"max_in_flight": 1},
        # The native predicts: the few milliseconds a round the target counts as load. The
        # compiled members score a round in ~0.1 ms, which a fast host's burst left below
        # the target (this test is about the signal, not the runtime).
        runtime="native",
    )
    deploy(args, name=APP, route_prefix=f"/{APP}")
    base = serve_app.replace(urlsplit(serve_app).path, f"/{APP}")
    stop = threading.Event()
    statuses: list[int] = []

    try:
        assert len(replica_actor_names(APP, MEMBERS)) == 1
        with ThreadPoolExecutor(max_workers=12) as pool:
            for i in range(12):
                pool.submit(login_loop, base, i, stop, statuses)
            try:
                peak = wait_until(
                    lambda: (n := len(replica_actor_names(APP, MEMBERS))) > 1 and n,
                    "scaled above min_replicas under the burst",
                    90.0,
                )
            finally:
                stop.set()
        assert peak <= SCALING["max_replicas"]
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
        burst_end = time.monotonic()
        # Idle: utilization falls to 0, and after downscale_delay_s the deployment is back at
        # its minimum (replicas drain first).
        wait_until(
            lambda: len(replica_actor_names(APP, MEMBERS)) == 1, "back to min_replicas", 120.0
        )
        assert time.monotonic() - burst_end >= SCALING["downscale_delay_s"] - 1.0
    finally:
        stop.set()
        undeploy(APP)


def test_logins_held_in_the_router_scale_it_up(serve_app, tiny_version_dir):
    # The router's target was once Serve's ongoing-requests count, above what its edge bound
    # lets into a replica: it could never scale. Now each replica reports the logins it holds
    # over that bound (4 here), and 8 clients on logins a slow member keeps ~200 ms in the
    # version hold it well above the target.
    base, version_app, router_app = deploy_router_over(
        serve_app,
        app_args(
            tiny_version_dir,
            # The version's members all in its supervisor: one replica to start, not five.
            layout={"placement": "auto"},
            straggler_grace_ms=None,
            faults={"slow_members_ms": {SLOW_MEMBER: 200}},
        ),
        "router-scale",
        {
            "admission": {"max_in_flight": 4},
            "router": {
                "num_cpus": 0.05,
                "autoscaling": {**SCALING, "max_replicas": 2, "target_utilization": 0.25},
            },
        },
    )
    stop = threading.Event()
    statuses: list[int] = []

    try:
        assert len(replica_actor_names(router_app, "router")) == 1
        with ThreadPoolExecutor(max_workers=8) as pool:
            for i in range(8):
                pool.submit(login_loop, base, i, stop, statuses)
            try:
                wait_until(
                    lambda: len(replica_actor_names(router_app, "router")) == 2,
                    "a second router replica under held logins",
                    90.0,
                )
            finally:
                stop.set()
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
    finally:
        stop.set()
        undeploy(router_app, version_app)
