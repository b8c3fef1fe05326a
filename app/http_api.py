"""The supervisor's HTTP surface (FastAPI), built per replica around an OfferService."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, Header, HTTPException

from app.offer_service import OfferService, UnknownGame
from app.schemas import EnsembleInfo, ErrorBody, Health, OfferRequest, OfferResponse

API_DESCRIPTION = """\
Picks one in-game offer for a player at login. The answer is chosen by an ensemble of
independently trained members scored in parallel; when it cannot be personalized in time it is
a non-personalized fallback with `personalized: false` and a `fallback_reason`.
"""


def build_http_api(service: OfferService) -> FastAPI:
    api = FastAPI(
        title="Dynamic Offers",
        version="1",
        description=API_DESCRIPTION,
    )

    @api.post(
        "/v1/offers",
        response_model=OfferResponse,
        responses={404: {"model": ErrorBody, "description": "game not served here"}},
        summary="Choose the offer to show a player who just logged in",
    )
    async def create_offer(
        body: OfferRequest,
        x_request_id: Annotated[
            str | None,
            Header(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$", description="caller's trace id"),
        ] = None,
    ) -> OfferResponse:
        try:
            return await service.recommend(body, x_request_id)
        except UnknownGame:
            raise HTTPException(
                status_code=404,
                detail=f"game {body.game!r} is not served here; this application serves "
                f"{service.game!r} version {service.version!r}",
            ) from None

    @api.get("/healthz", response_model=Health, summary="Liveness of this application")
    async def healthz() -> Health:
        return Health(game=service.game, version=service.version)

    @api.get("/v1/ensemble", response_model=EnsembleInfo, summary="The served ensemble version")
    async def ensemble() -> EnsembleInfo:
        return service.describe()

    return api
