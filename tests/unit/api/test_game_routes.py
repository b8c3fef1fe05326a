"""The game router's HTTP surface: the edge's arrival stamp reaches the router's budget."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from app.api.game_routes import build_router_api
from app.api.schemas import SplitInfo
from app.core.routing.offer_routing import OfferRouter
from app.core.routing.version_split import VersionSplit

pytestmark = pytest.mark.unit

GAME = "galaxy-raiders"


class Backend:
    def __init__(self):
        self.deadlines = []

    async def offer(self, version, payload, request_id, wait_ms=0.0):
        self.deadlines.append(payload["deadline_ms"])
        return {"status": 503, "detail": "busy", "retry_after_s": 1}


def client():
    backend = Backend()
    split = VersionSplit(GAME, ["2026-11"], {"2026-11": 1})
    router = OfferRouter(split, backend, budget_ms=1000, failover_reserve_ms=100, retry_after_s=1)
    api = build_router_api(router, split_info=lambda: SplitInfo.model_construct())
    return TestClient(api), backend


@pytest.mark.parametrize(("waited_s", "most_ms"), [(None, 1000), (0.4, 600)])
def test_the_arrival_stamp_comes_off_the_budget(waited_s, most_ms):
    http, backend = client()
    headers = {} if waited_s is None else {"X-Request-Start": f"t={time.time() - waited_s:.6f}"}
    response = http.post("/v1/offers", json={"player_id": "p1", "game": GAME}, headers=headers)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    (given,) = backend.deadlines
    # Bounded above exactly; below only loosely (time passes between the stamp and the route).
    assert most_ms - 300 < given <= most_ms
