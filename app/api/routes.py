"""The supervisor's HTTP surface (FastAPI), built per replica around an OfferService."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request, Security
from fastapi.security import APIKeyHeader
from pydantic import SecretStr

from app.api.admission import (
    ARRIVAL_STATE_KEY,
    AdmissionMiddleware,
    refusal_headers,
)
from app.api.schemas import (
    REQUEST_ID_PATTERN,
    EnsembleInfo,
    ErrorBody,
    Health,
    MemberInfo,
    MemberPlacementInfo,
    OfferOut,
    OfferRequest,
    OfferResponse,
    PrecomputedInfo,
    Timings,
)
from app.contract.feature_schema import FeatureValue
from app.contract.manifest import Manifest, Offer
from app.core.admission import AdmissionGate, EdgeArrival
from app.core.online.offer_service import (
    BudgetSpentBeforeStart,
    OfferAnswer,
    OfferQuery,
    OfferService,
    UnknownGame,
)
from app.core.online.precomputed import PrecomputedTier

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


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "body is not readable text (e.g. not UTF-8)"},
    401: {"model": ErrorBody, "description": "missing or wrong API key (when auth is on)"},
    413: {"model": ErrorBody, "description": f"body larger than {MAX_BODY_BYTES} bytes"},
    503: {
        "model": ErrorBody,
        "description": "overloaded, or the request's budget was spent before it got here; "
        "retry after the Retry-After header's seconds",
    },
}


def build_http_api(
    service: OfferService,
    *,
    admission: AdmissionGate,
    retry_after_s: float,
    api_key_sha256: SecretStr | None = None,
    knobs: Callable[[], tuple[dict[str, Any], str | None]] | None = None,
    layout: Mapping[str, Mapping[str, Any]] | None = None,
    startup_ms: Mapping[str, float] | None = None,
) -> FastAPI:
    """`knobs`: the replica's live knobs and its last refused change, `layout`: where each
    member is scored, and `startup_ms`: where the replica's start went, for GET /v1/ensemble."""
    # The key check (and its security scheme in the OpenAPI document) only when auth is on.
    authenticated = [Depends(api_key_check(api_key_sha256))] if api_key_sha256 else []
    api = FastAPI(
        title="Dynamic Offers",
        version="1",
        description=API_DESCRIPTION,
        max_body_size=MAX_BODY_BYTES,
    )
    api.add_middleware(AdmissionMiddleware, gate=admission, retry_after_s=retry_after_s)

    @api.post(
        "/v1/offers",
        response_model=OfferResponse,
        responses={404: {"model": ErrorBody, "description": "game not served here"}, **_ERRORS},
        summary="Choose the offer to show a player who just logged in",
        dependencies=authenticated,
    )
    async def create_offer(
        request: Request,
        body: OfferRequest,
        x_request_id: Annotated[
            str | None,
            Header(
                pattern=REQUEST_ID_PATTERN,
                description="caller's trace id, echoed as request_id; 1-64 of A-Z a-z 0-9 _ . -",
            ),
        ] = None,
    ) -> OfferResponse:
        arrival: EdgeArrival | None = getattr(request.state, ARRIVAL_STATE_KEY, None)
        try:
            answer = await service.recommend(to_query(body, x_request_id, arrival))
        except BudgetSpentBeforeStart as exc:
            raise HTTPException(
                status_code=503, detail=str(exc), headers=refusal_headers(retry_after_s)
            ) from None
        except UnknownGame:
            raise HTTPException(
                status_code=404,
                detail=f"game {body.game!r} is not served here; this application serves "
                f"{service.game!r} version {service.version!r}",
            ) from None
        return to_response(answer)

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
        info = describe(service.manifest)
        info.precomputed = precomputed_info(service.precomputed)
        if knobs is not None:
            info.knobs, info.knobs_rejected = knobs()
        info.layout = {
            name: MemberPlacementInfo.model_validate(view) for name, view in (layout or {}).items()
        }
        info.startup_ms = dict(startup_ms or {})
        return info

    return api


def to_query(
    body: OfferRequest, request_id: str | None, arrival: EdgeArrival | None = None
) -> OfferQuery:
    overrides: dict[str, FeatureValue] = {}
    if body.context is not None and body.context.platform is not None:
        overrides["platform"] = body.context.platform
    return OfferQuery(
        game=body.game,
        player_id=body.player_id,
        overrides=overrides,
        deadline_ms=body.deadline_ms,
        request_id=request_id,
        started=arrival.started if arrival is not None else None,
    )


def to_response(answer: OfferAnswer) -> OfferResponse:
    decision = answer.decision
    return OfferResponse(
        request_id=answer.request_id,
        game=answer.game,
        ensemble_version=answer.version,
        offer=offer_out(decision.offer),
        propensity=decision.propensity,
        expected_revenue=decision.expected_revenue,
        personalized=answer.personalized,
        fallback_reason=answer.fallback_reason,
        tier=answer.tier,
        members_answered=len(answer.answered_members),
        members_total=answer.members_total,
        answered_members=answer.answered_members,
        missing_members=answer.missing_members,
        timings=Timings(
            features_ms=round(answer.features_ms, 3),
            fanout_ms=round(answer.fanout_ms, 3),
            total_ms=round(answer.total_ms, 3),
        ),
    )


def precomputed_info(tier: PrecomputedTier) -> PrecomputedInfo | None:
    offers, age = tier.offers, tier.age_s()
    if offers is None or age is None:
        return None
    snapshot = offers.snapshot
    return PrecomputedInfo(
        source=offers.source,
        players=snapshot.header.players,
        scored_at=snapshot.header.scored_at.isoformat(),
        age_s=round(age, 1),
        fresh=tier.fresh(),
        max_age_s=tier.max_age_s,
        bytes_per_player=round(snapshot.nbytes / max(snapshot.header.players, 1), 2),
    )


def describe(m: Manifest) -> EnsembleInfo:
    return EnsembleInfo(
        game=m.game,
        version=m.version,
        profile=m.profile,
        ensemble_auc=m.ensemble_auc,
        oracle_auc=m.oracle_auc,
        feature_schema_version=m.feature_schema.version,
        features=m.feature_schema.column_names,
        offers=[offer_out(o) for o in m.offers],
        fallback_offer_id=m.fallback_offer_id,
        members=[
            MemberInfo(
                name=e.name,
                framework=e.framework,
                estimator=e.estimator,
                weight=e.weight,
                auc=e.auc,
                training=e.training,
            )
            for e in m.members
        ],
    )


def offer_out(offer: Offer) -> OfferOut:
    return OfferOut(
        offer_id=offer.offer_id,
        item=offer.item,
        price=offer.price,
        discount=offer.discount,
        net_price=round(offer.net_price, 2),
    )
