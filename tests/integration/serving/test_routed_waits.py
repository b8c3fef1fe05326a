"""A login through the game's router that finds its version full waits for a slot, in real Serve.

The version admits one login at a time (its supervisor's bound is 1) and a slow member keeps
each login ~200 ms. Two logins sent together through the router are both answered:

- before the router has learned the version's bound, both reach the supervisor, which holds
  the second for its one slot (`AdmissionGate.enter_within`) instead of refusing it;
- once it has, the router holds the second itself (`VersionLoad.acquire`) and sends it when
  the first is answered.

Before either wait, the second login of each pair was refused with a 503: by the supervisor
(its refusal was not retried while the router did not know the version's room), then by the
router, which knew the version full.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from models.population import player_id
from tests.integration.conftest import app_args, deploy_router_over, undeploy
from tests.integration.serving.test_reliability import SLOW_MEMBER, offer

pytestmark = pytest.mark.integration


def test_a_full_version_holds_routed_logins_for_a_slot_instead_of_refusing(
    serve_app, tiny_version_dir
):
    base, version_app, router_app = deploy_router_over(
        serve_app,
        app_args(
            tiny_version_dir,
            admission={"max_in_flight": 1},
            # Every member scored in the supervisor (the tiny members cost less than a hop):
            # one replica to start instead of five; the slow member slows the whole group.
            layout={"placement": "auto"},
            straggler_grace_ms=None,
            faults={"slow_members_ms": {SLOW_MEMBER: 200}},
        ),
        "routed-waits",
        {
            # A login may wait up to 1.5 s for room (half the budget): far more than one
            # ~200 ms login ahead of it, even on a loaded host.
            "request_budget_ms": 3000,
            "admission": {"max_in_flight": 4},
            "router": {"num_cpus": 0.05, "autoscaling": {"min_replicas": 1, "max_replicas": 1}},
        },
    )

    def pair(first: int) -> list[tuple[int, dict]]:
        with ThreadPoolExecutor(max_workers=2) as pool:
            replies = list(pool.map(lambda n: offer(base, player_id(n)), (first, first + 1)))
        return [(r.status_code, r.json()) for r in replies]

    try:
        # The router has not yet seen a reply from the version: the supervisor holds one.
        for status, body in pair(1):
            assert status == 200, body
            assert body["personalized"] is True and body["rerouted_reason"] is None
        # It has now (the reply carries the bound): the router holds one.
        for status, body in pair(3):
            assert status == 200, body
            assert body["personalized"] is True and body["rerouted_reason"] is None
    finally:
        undeploy(router_app, version_app)
