"""HTTP request and response bodies of the offer API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.contract.ids import GAME_PATTERN, PLAYER_ID_PATTERN
from app.core.online.offer_service import FallbackReason, Tier

# A caller's trace id: echoed in the response and in logs, so bounded like every id.
REQUEST_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


class RequestContext(BaseModel):
    """What the game server knows about this login that the feature store may not."""

    model_config = ConfigDict(extra="forbid")

    platform: Literal["android", "ios"] | None = Field(
        default=None, description="device of this session; overrides the stored platform"
    )
    app_version: str | None = Field(default=None, max_length=32, pattern=r"^[A-Za-z0-9._+-]+$")
    session_id: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")


class OfferRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"player_id": "p0000042", "game": "galaxy-raiders"}]},
    )

    player_id: str = Field(pattern=PLAYER_ID_PATTERN)
    game: str = Field(pattern=GAME_PATTERN)
    context: RequestContext | None = None
    deadline_ms: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="the caller's own time budget for this answer; the service uses the "
        "tighter of this and its configured budget",
    )


class OfferOut(BaseModel):
    offer_id: str
    item: str
    price: float = Field(description="list price in USD")
    discount: float = Field(description="fraction taken off the list price")
    net_price: float = Field(description="price the player pays, in USD")


class Timings(BaseModel):
    features_ms: float = Field(description="feature-store read")
    fanout_ms: float = Field(description="parallel member scoring, until the last answer")
    total_ms: float = Field(description="whole request inside the supervisor")


class OfferResponse(BaseModel):
    request_id: str
    game: str
    ensemble_version: str
    offer: OfferOut
    propensity: float = Field(ge=0, le=1, description="estimated purchase probability")
    expected_revenue: float = Field(ge=0, description="propensity x net price, USD")
    personalized: bool = Field(
        description="scored now from the player's current features (tier `online`)"
    )
    fallback_reason: FallbackReason | None = Field(
        default=None, description="why the answer is not personalized; null when it is"
    )
    tier: Tier = Field(
        description="where the offer came from: `online` (scored now), `precomputed` (the "
        "last batch run's offer for this player, when the online path failed) or `default` "
        "(the version's non-personalized offer)"
    )
    members_answered: int
    members_total: int
    answered_members: list[str] = Field(
        description="members that answered in time; aggregated unless this is a fallback"
    )
    missing_members: dict[str, str] = Field(
        default_factory=dict,
        description="members left out, with why: timeout, bad_output or the error type",
    )
    timings: Timings
    assigned_version: str | None = Field(
        default=None,
        description="the version the game's split assigned this player to (POST "
        "/<game>/v1/offers); null on a version's own route",
    )
    rerouted_reason: Literal["unavailable", "failed", "timeout"] | None = Field(
        default=None,
        description="why another version than the assigned one answered: its application "
        "is missing or not running, it failed, or it did not answer in time; null if the "
        "assigned version answered",
    )


class MemberInfo(BaseModel):
    name: str
    framework: str
    estimator: str
    weight: float
    auc: float
    training: dict[str, str | int | float]


class PrecomputedInfo(BaseModel):
    source: str = Field(description="the snapshot file this replica answers from")
    players: int
    scored_at: str = Field(description="when the batch run scored them (ISO 8601, UTC)")
    age_s: float
    fresh: bool = Field(description="younger than max_age_s: answering")
    max_age_s: float
    bytes_per_player: float


class MemberPlacementInfo(BaseModel):
    placement: Literal["inline", "grouped", "dedicated"] = Field(
        description="inline: scored inside the supervisor replica; grouped: in a member "
        "deployment shared with other members; dedicated: its own deployment"
    )
    deployment: str | None = Field(description="the member deployment; null when inline")
    runtime: Literal["onnx", "native"] | None = Field(
        default=None,
        description="onnx: its compiled graph in ONNX Runtime, fused with the other compiled "
        "members of the same process; native: its training library's predict",
    )
    predict_ms_per_call: float | None = Field(
        default=None, description="layout auto: predict cost per fan-out it planned with"
    )
    share: float | None = Field(
        default=None, description="layout auto: its share of the ensemble's predict cost"
    )
    reason: str | None = Field(default=None, description="layout auto: why it is placed there")


class EnsembleInfo(BaseModel):
    game: str
    version: str
    profile: str
    ensemble_auc: float
    oracle_auc: float
    feature_schema_version: str
    features: list[str]
    offers: list[OfferOut]
    fallback_offer_id: str
    members: list[MemberInfo]
    knobs: dict[str, Any] = Field(
        default_factory=dict,
        description="the runtime knobs this replica applies (request_budget_ms, quorum, "
        "straggler_grace_ms, member_weights, coalescing)",
    )
    knobs_rejected: str | None = Field(
        default=None,
        description="the last live change this replica refused, and why; null if none",
    )
    precomputed: PrecomputedInfo | None = Field(
        default=None,
        description="the precomputed-offers snapshot this replica holds; null if none",
    )
    startup_ms: dict[str, float] = Field(
        default_factory=dict,
        description="where the answering replica's start went, step by step, in ms",
    )
    layout: dict[str, MemberPlacementInfo] = Field(
        default_factory=dict,
        description="member -> where this application scores it (app.serving.member_layout)",
    )


class VersionShare(BaseModel):
    version: str
    application: str
    weight: float
    share: float


class SplitInfo(BaseModel):
    game: str
    versions: list[VersionShare]
    request_budget_ms: float = Field(description="a routed login's whole budget")
    failover_reserve_ms: float = Field(
        description="kept back from the assigned version so another can still answer"
    )
    knobs_rejected: str | None = Field(
        default=None, description="the last live change this router refused, and why"
    )


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    game: str
    version: str


class ErrorBody(BaseModel):
    detail: str
