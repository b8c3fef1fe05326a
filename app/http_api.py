"""The supervisor's HTTP surface (FastAPI), built per replica around an OfferService."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Header, HTTPException, Security
from fastapi.security import APIKeyHeader
from pydantic import SecretStr

from app.offer_service import OfferService, UnknownGame
from app.schemas import EnsembleInfo, ErrorBody, Health, OfferRequest, OfferResponse

API_KEY_HEADER = "X-API-Key"
# A login request is a few hundred bytes; anything near this is not a game server talking.
MAX_BODY_BYTES = 16 * 1024

API_DESCRIPTION = """\
Picks one in-game offer for a player at login. The answer is chosen by an ensemble of
independently trained members scored in parallel; when it cannot be personalized in time it is
a non-personalized fallback with `personalized: false` and a `fallback_reason`.
"""


def api_key_check(expected_sha256: SecretStr) -> Callable[..., Awaitable[None]]:
    """A dependency that lets a request through only with the right X-API-Key.

    Only the key's SHA-256 is configured, and digests are compared in constant time, so
    neither the settings nor response timings reveal the key.
    """
    header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False)

    # Security() as the default, not inside Annotated: this module's annotations are strings
    # (PEP 563), and FastAPI resolves them against module globals, where `header` is not.
    async def check(key: str | None = Security(header)) -> None:  # noqa: B008
        given = hashlib.sha256((key or "").encode()).hexdigest()
        if key is None or not hmac.compare_digest(given, expected_sha256.get_secret_value()):
            raise HTTPException(
                status_code=401,
                detail=f"missing or wrong {API_KEY_HEADER} header",
                headers={"WWW-Authenticate": "ApiKey"},
            )

    return check


_ERRORS = {
    400: {"model": ErrorBody, "description": "body is not readable text (e.g. not UTF-8)"},
    401: {"model": ErrorBody, "description": "missing or wrong API key (when auth is on)"},
    413: {"model": ErrorBody, "description": f"body larger than {MAX_BODY_BYTES} bytes"},
    503: {"description": "overloaded; retry after the Retry-After header's seconds"},
}


def build_http_api(service: OfferService, *, api_key_sha256: SecretStr | None = None) -> FastAPI:
    # The key check (and its security scheme in the OpenAPI document) only when auth is on.
    authenticated = [Depends(api_key_check(api_key_sha256))] if api_key_sha256 else []
    api = FastAPI(
        title="Dynamic Offers",
        version="1",
        description=API_DESCRIPTION,
        max_body_size=MAX_BODY_BYTES,
    )

    @api.post(
        "/v1/offers",
        response_model=OfferResponse,
        responses={404: {"model": ErrorBody, "description": "game not served here"}, **_ERRORS},
        summary="Choose the offer to show a player who just logged in",
        dependencies=authenticated,
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

    @api.get(
        "/v1/ensemble",
        response_model=EnsembleInfo,
        responses={401: _ERRORS[401]},
        summary="The served ensemble version",
        dependencies=authenticated,
    )
    async def ensemble() -> EnsembleInfo:
        return service.describe()

    return api
