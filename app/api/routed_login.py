"""A login that a game's version router sends to one version over a Serve handle.

The router already checked the API key and the body; the version still applies its own
admission gate and budget, and answers the way its HTTP route would, as a plain dict that
crosses the handle: `{"status": 200, "body": <OfferResponse>, "max_in_flight": ...}` or a
refusal `{"status": 503 | 404, "detail": ..., "retry_after_s": ..., ...}`.
"""

from __future__ import annotations

import time
from typing import Any

from app.api.routes import to_query, to_response
from app.api.schemas import OfferRequest
from app.core.admission import (
    OVERLOADED_DETAIL,
    AdmissionGate,
    EdgeArrival,
    waited_since,
)
from app.core.online.offer_service import BudgetSpentBeforeStart, OfferService, UnknownGame

OVERLOADED = OVERLOADED_DETAIL


async def answer_routed_login(
    service: OfferService,
    gate: AdmissionGate,
    payload: dict[str, Any],
    *,
    request_id: str | None,
    retry_after_s: float,
    wait_ms: float = 0.0,
    sent_at_unix_s: float | None = None,
) -> dict[str, Any]:
    """One routed login's reply; `payload["deadline_ms"]` is what is left of its budget.

    Every reply carries the replica's admission bound (`max_in_flight`), and a refusal by the
    gate says so (`replica_full`): the router learns from them how many logins the version
    takes, and whether another replica may still have room (app.core.routing.version_load).

    A full replica holds the login up to `wait_ms` for one of its slots; the wait comes off
    the login's budget. The budget runs from `sent_at_unix_s`, when the router sent it (wall
    clock, read like a front proxy's X-Request-Start), else from its arrival here: the
    router waits for the reply only the budget it gave plus the hop back, so the hop in (the
    handle's queue, this replica's busy loop) must come off the budget, not after it."""
    bound = gate.max_in_flight
    transit_s = 0.0
    if sent_at_unix_s is not None:
        transit_s = waited_since(sent_at_unix_s, time.time()) or 0.0
    arrival = EdgeArrival(
        started=time.perf_counter() - transit_s, waited_before_ms=transit_s * 1000.0
    )
    if not await gate.enter_within(wait_ms / 1000.0):
        return {
            "status": 503,
            "detail": OVERLOADED,
            "retry_after_s": retry_after_s,
            "replica_full": True,
            "max_in_flight": bound,
        }
    admitted = time.perf_counter()
    served_s: float | None = None  # only an answered login is a service time (app.api.admission)
    try:
        body = OfferRequest.model_validate(payload)
        answer = await service.recommend(to_query(body, request_id, arrival))
        served_s = time.perf_counter() - admitted
    except BudgetSpentBeforeStart as exc:
        return {
            "status": 503,
            "detail": str(exc),
            "retry_after_s": retry_after_s,
            "max_in_flight": bound,
        }
    except UnknownGame:
        return {"status": 404, "detail": f"game {payload.get('game')!r} is not served here"}
    finally:
        gate.leave(served_s)
    return {
        "status": 200,
        "body": to_response(answer).model_dump(mode="json"),
        "max_in_flight": bound,
    }
