"""The supervisor's business logic: features -> candidates -> fan-out -> aggregate -> offer.

A plain class with injected collaborators, so it runs the same under Ray Serve (handles), in
the legacy single-process server (in-process models) and in unit tests (fakes).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from app.aggregation import weighted_mean
from app.fanout import EnsembleScorer, FanoutResult
from app.feature_store import FeatureStore, FeatureStoreUnavailable
from app.manifest import Manifest, Offer
from app.offers import OfferCatalog, OfferDecision
from app.schemas import (
    EnsembleInfo,
    FallbackReason,
    MemberInfo,
    OfferOut,
    OfferRequest,
    OfferResponse,
    Timings,
)

logger = logging.getLogger(__name__)


class UnknownGame(LookupError):
    """The request names a game this application does not serve."""


@dataclass(frozen=True)
class Deadline:
    """A request's time budget, measured on the monotonic clock from when it arrived."""

    started: float
    budget_s: float

    @classmethod
    def start(cls, budget_ms: float) -> Deadline:
        return cls(time.perf_counter(), budget_ms / 1000.0)

    def remaining_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0


class OfferService:
    def __init__(
        self,
        manifest: Manifest,
        feature_store: FeatureStore,
        scorer: EnsembleScorer,
        *,
        request_budget_ms: float,
        quorum: float = 0.0,
    ) -> None:
        if not 0.0 <= quorum <= 1.0:
            raise ValueError(f"quorum is a share of the ensemble's weight, got {quorum}")
        self.manifest = manifest
        self.catalog = OfferCatalog(manifest)
        self._features = feature_store
        self._scorer = scorer
        self._budget_ms = request_budget_ms
        self._quorum = quorum
        self._total_weight = sum(e.weight for e in manifest.members)

    @property
    def game(self) -> str:
        return self.manifest.game

    @property
    def version(self) -> str:
        return self.manifest.version

    async def recommend(
        self, request: OfferRequest, request_id: str | None = None
    ) -> OfferResponse:
        """One offer for one player login; always an answer, personalized or a flagged fallback.

        Raises:
            UnknownGame: the request's game is not this application's game.
        """
        if request.game != self.game:
            raise UnknownGame(request.game)
        budget_ms = self._budget_ms
        if request.deadline_ms is not None:
            budget_ms = min(budget_ms, request.deadline_ms)
        deadline = Deadline.start(budget_ms)
        request_id = request_id or uuid.uuid4().hex
        overrides = {}
        if request.context is not None and request.context.platform is not None:
            overrides["platform"] = request.context.platform

        try:
            row = await self._features.player_row(request.player_id, overrides)
        except FeatureStoreUnavailable as exc:
            logger.warning("feature store unavailable for %s: %s", request_id, exc)
            row, reason = None, FallbackReason.FEATURE_STORE_UNAVAILABLE
        else:
            reason = FallbackReason.UNKNOWN_PLAYER if row is None else None
        features_ms = deadline.elapsed_ms()

        if row is None:
            return self._response(
                request_id, self.catalog.fallback(), reason, None, deadline, features_ms
            )

        candidates = self.catalog.candidates(row)
        result = await self._scorer.score(candidates, deadline.remaining_s())
        answered_weight = sum(a.weight for a in result.answers)
        if not result.answers or answered_weight < self._quorum * self._total_weight:
            reason = FallbackReason.QUORUM if result.answers else FallbackReason.NO_MEMBERS_ANSWERED
            logger.warning("%s for %s: missing %s", reason.value, request_id, result.missing)
            return self._response(
                request_id, self.catalog.fallback(), reason, result, deadline, features_ms
            )
        decision = self.catalog.decide(weighted_mean(result.answers))
        return self._response(request_id, decision, None, result, deadline, features_ms)

    async def warm_up(self, budget_s: float) -> FanoutResult:
        """Route one candidate matrix (schema defaults) through every member.

        The first call through a Serve handle has to discover the member's replicas; doing it
        at start-up keeps that cost out of the first players' budgets.
        """
        defaults = self.manifest.feature_schema.encode_record({})
        return await self._scorer.score(self.catalog.candidates(defaults), budget_s)

    def _response(
        self,
        request_id: str,
        decision: OfferDecision,
        reason: FallbackReason | None,
        fanout: FanoutResult | None,
        deadline: Deadline,
        features_ms: float,
    ) -> OfferResponse:
        answered = [a.name for a in fanout.answers] if fanout else []
        return OfferResponse(
            request_id=request_id,
            game=self.game,
            ensemble_version=self.version,
            offer=_offer_out(decision.offer),
            propensity=decision.propensity,
            expected_revenue=decision.expected_revenue,
            personalized=reason is None,
            fallback_reason=reason,
            members_answered=len(answered),
            members_total=len(self.manifest.members),
            answered_members=answered,
            missing_members=dict(fanout.missing) if fanout else {},
            timings=Timings(
                features_ms=round(features_ms, 3),
                fanout_ms=round(fanout.elapsed_ms, 3) if fanout else 0.0,
                total_ms=round(deadline.elapsed_ms(), 3),
            ),
        )

    def describe(self) -> EnsembleInfo:
        m = self.manifest
        return EnsembleInfo(
            game=m.game,
            version=m.version,
            profile=m.profile,
            ensemble_auc=m.ensemble_auc,
            oracle_auc=m.oracle_auc,
            feature_schema_version=m.feature_schema.version,
            features=m.feature_schema.column_names,
            offers=[_offer_out(o) for o in m.offers],
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


def _offer_out(offer: Offer) -> OfferOut:
    return OfferOut(
        offer_id=offer.offer_id,
        item=offer.item,
        price=offer.price,
        discount=offer.discount,
        net_price=round(offer.net_price, 2),
    )
