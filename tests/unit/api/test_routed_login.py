"""A login from the game's router, as a version answers it over the handle."""

import asyncio

import numpy as np
import pytest

from app.api.routed_login import answer_routed_login
from app.core.admission import AdmissionGate
from app.core.online.fanout import Fanout
from app.core.online.offer_service import OfferService
from tests.support import FakeFeatureStore, FakeMember, small_manifest

pytestmark = pytest.mark.unit


def service():
    manifest = small_manifest(weights=(1.0,))
    store = FakeFeatureStore(manifest.feature_schema, {"p1": {"level": 5, "platform": "ios"}})
    member = FakeMember("m0", 1.0, lambda m: np.full(m.shape[0], 0.1))
    return OfferService(manifest, store, Fanout([member]), request_budget_ms=500, quorum=0.5)


def answer(gate, payload=None):
    payload = payload or {"player_id": "p1", "game": "test-game", "deadline_ms": 400}
    return asyncio.run(
        answer_routed_login(service(), gate, payload, request_id="r-1", retry_after_s=2.0)
    )


def test_an_answer_tells_the_router_the_replicas_bound():
    gate = AdmissionGate(3)
    reply = answer(gate)
    assert reply["status"] == 200 and reply["body"]["personalized"] is True
    assert reply["max_in_flight"] == 3 and "replica_full" not in reply
    assert gate.in_flight == 0


def test_a_full_replica_says_so_with_its_bound():
    gate = AdmissionGate(1)
    assert gate.try_enter()
    reply = answer(gate)
    assert reply == {
        "status": 503,
        "detail": reply["detail"],
        "retry_after_s": 2.0,
        "replica_full": True,
        "max_in_flight": 1,
    }
    assert reply["detail"].startswith("overloaded") and gate.in_flight == 1


def test_a_full_replica_holds_a_routed_login_for_a_slot_within_its_wait():
    gate = AdmissionGate(1)
    payload = {"player_id": "p1", "game": "test-game", "deadline_ms": 400}

    async def scenario():
        assert gate.try_enter()  # another login holds the one slot
        waiting = asyncio.create_task(
            answer_routed_login(
                service(), gate, payload, request_id="r-2", retry_after_s=2.0, wait_ms=300.0
            )
        )
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()  # held, not refused
        gate.leave()
        return await waiting

    reply = asyncio.run(scenario())
    assert reply["status"] == 200 and reply["body"]["personalized"] is True
    assert gate.in_flight == 0 and gate.refused == 0


def test_a_routed_login_that_waited_out_its_budget_is_not_scored():
    # The wait comes off the login's budget: its deadline starts as it reaches the replica.
    gate = AdmissionGate(1)
    payload = {"player_id": "p1", "game": "test-game", "deadline_ms": 20}

    async def scenario():
        assert gate.try_enter()
        waiting = asyncio.create_task(
            answer_routed_login(
                service(), gate, payload, request_id="r-3", retry_after_s=2.0, wait_ms=500.0
            )
        )
        await asyncio.sleep(0.05)  # past its 20 ms budget
        gate.leave()
        return await waiting

    reply = asyncio.run(scenario())
    assert reply["status"] == 503 and "replica_full" not in reply
    assert gate.in_flight == 0


def test_a_routed_login_whose_wait_runs_out_is_a_full_replica_refusal():
    gate = AdmissionGate(1)
    assert gate.try_enter()
    payload = {"player_id": "p1", "game": "test-game", "deadline_ms": 400}
    reply = asyncio.run(
        answer_routed_login(
            service(), gate, payload, request_id="r-4", retry_after_s=2.0, wait_ms=10.0
        )
    )
    assert reply["status"] == 503 and reply["replica_full"] is True
    assert gate.in_flight == 1 and gate.refused == 1


def test_only_an_answered_routed_login_teaches_the_bound_its_service_time():
    """A game this version does not serve is answered at once: no service time learned."""
    from app.core.service_time_limit import MIN_SAMPLES, ServiceTimeLimit

    limit = ServiceTimeLimit(ceiling=1, budget_s=1.0, queue_wait_s=0.5, loop_lag_s=lambda: 0.0)
    gate = AdmissionGate(1, limit=limit)
    for _ in range(MIN_SAMPLES):
        assert answer(gate, {"player_id": "p1", "game": "other-game"})["status"] == 404
    assert limit.queue_room() == 1  # nothing learned: the least room
    for _ in range(MIN_SAMPLES):
        assert answer(gate)["status"] == 200
    assert limit.queue_room() > 1 and gate.in_flight == 0


def test_a_routed_logins_budget_runs_from_the_routers_send():
    """The router waits only the budget it gave plus the hop back: time the login spent
    reaching this replica (the handle's queue, a busy loop) comes off its budget here."""
    import time

    gate = AdmissionGate(3)
    payload = {"player_id": "p1", "game": "test-game", "deadline_ms": 200}
    sent_long_ago = time.time() - 0.3  # longer in transit than its whole budget
    reply = asyncio.run(
        answer_routed_login(
            service(), gate, payload, request_id="r-9", retry_after_s=2.0,
            sent_at_unix_s=sent_long_ago,
        )
    )  # fmt: skip
    assert reply["status"] == 503 and "replica_full" not in reply
    # Sent just now, the same login is answered.
    fresh = asyncio.run(
        answer_routed_login(
            service(), gate, payload, request_id="r-10", retry_after_s=2.0,
            sent_at_unix_s=time.time(),
        )
    )  # fmt: skip
    assert fresh["status"] == 200 and gate.in_flight == 0
