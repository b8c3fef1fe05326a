"""The HTTP surface of a game's router: POST /v1/offers routed to a version by the split."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.responses import JSONResponse
from pydantic import SecretStr

from app.api.admission import refusal_headers
from app.api.routes import _ERRORS, API_DESCRIPTION, MAX_BODY_BYTES, api_key_check
from app.api.schemas import (
    REQUEST_ID_PATTERN,
    OfferRequest,
    OfferResponse,
    SplitInfo,
)
from app.core.admission import parse_request_start
from app.core.routing.offer_routing import OfferRouter


def build_router_api(
    router: OfferRouter,
    *,
    split_info: Callable[[], SplitInfo],
    api_key_sha256: SecretStr | None = None,
) -> FastAPI:
    authenticated = [Depends(api_key_check(api_key_sha256))] if api_key_sha256 else []
    api = FastAPI(
        title="Dynamic Offers: version router",
        version="1",
        description=API_DESCRIPTION
        + "\nEach player is routed to one of the game's ensemble versions by weight, sticky "
        "by player: the same player gets the same version until the weights change.",
        max_body_size=MAX_BODY_BYTES,
    )

    @api.post(
        "/v1/offers",
        response_model=OfferResponse,
        responses={404: {"description": "game not served here"}, **_ERRORS},
        summary="Choose the offer for a player, from the version the player is assigned to",
        dependencies=authenticated,
    )
    async def create_offer(
        body: OfferRequest,
        x_request_id: Annotated[str | None, Header(pattern=REQUEST_ID_PATTERN)] = None,
        x_request_start: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> JSONResponse:
        if body.game != router.split.game:
            raise HTTPException(
                status_code=404,
                detail=f"game {body.game!r} is not served here; this router serves "
                f"{router.split.game!r}",
            )
        # The edge's arrival stamp: the wait in HAProxy's queue comes off the budget.
        waited_s = parse_request_start(x_request_start, time.time()) or 0.0
        reply = await router.route(
            body.model_dump(mode="json"), x_request_id, waited_ms=waited_s * 1000.0
        )
        if reply.status == 200 and reply.body is not None:
            return JSONResponse(reply.body)
        raise HTTPException(
            status_code=reply.status,
            detail=reply.detail or "no answer",
            headers=refusal_headers(reply.retry_after_s or 0.0) if reply.status == 503 else None,
        )

    @api.get("/v1/split", response_model=SplitInfo, summary="The version split in force")
    async def split() -> SplitInfo:
        return split_info()

    @api.get("/healthz", summary="Liveness of the router")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "game": router.split.game}

    return api
