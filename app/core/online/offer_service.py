"""The supervisor's business logic: features -> candidates -> fan-out -> aggregate -> offer.

A plain class with injected collaborators, so it runs the same under Ray Serve (handles), in
the legacy single-process server (in-process models) and in unit tests (fakes).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from app.contract.feature_schema import FeatureValue
from app.contract.manifest import Manifest
from app.core.aggregation import weighted_mean
from app.core.deadline import Deadline
from app.core.offers import OfferCatalog, OfferDecision
from app.core.online.fanout import EnsembleScorer, FanoutResult
from app.core.online.feature_source import FeatureSource, FeatureStoreUnavailable
from app.core.online.precomputed import PrecomputedTier
from app.core.tally_log import TallyLog
from app.core.telemetry import NoTelemetry, Telemetry

logger = logging.getLogger(__name__)


class UnknownGame(LookupError):
    """The request names a game this application does not serve."""


class BudgetSpentBeforeStart(RuntimeError):
    """The login waited in front of the service for its whole budget: too late to answer."""

    def __init__(self, waited_ms: float, budget_ms: float) -> None:
        super().__init__(
            f"the request waited {waited_ms:.0f} ms before reaching the service, "
            f"past its {budget_ms:.0f} ms budget"
        )
        self.waited_ms = waited_ms


class FallbackReason(StrEnum):
    UNKNOWN_PLAYER = "unknown_player"
    # Error, throttling, open circuit, or no answer within the request's budget.
    FEATURE_STORE_UNAVAILABLE = "feature_store_unavailable"
    NO_MEMBERS_ANSWERED = "no_members_answered"
    # Some members answered, but their weights sum to less than the configured quorum.
    QUORUM = "quorum"


class Tier(StrEnum):
    """Where an answer's offer came from."""

    ONLINE = "online"  # scored now, from the player's current features
    # The last batch run's offer for this player (app.core.online.precomputed): the online path
    # failed (fallback_reason says why), but the offer is still the player's own.
    PRECOMPUTED = "precomputed"
    DEFAULT = "default"  # the version's one non-personalized offer


# The online failures a precomputed offer stands in for. An unknown player is not one: the
# batch run read the same table, so it cannot know the player either.
PRECOMPUTED_COVERS = frozenset(
    {
        FallbackReason.FEATURE_STORE_UNAVAILABLE,
        FallbackReason.NO_MEMBERS_ANSWERED,
        FallbackReason.QUORUM,
    }
)


# Default age limit of a precomputed snapshot when the caller gives none (36 h: a daily
# batch run that failed once is still served).
DEFAULT_PRECOMPUTED_MAX_AGE_S = 36 * 3600.0


@dataclass(frozen=True)
class OfferQuery:
    """One login, as the offer service sees it."""

    game: str
    player_id: str
    # Fresher values from the request itself (e.g. this session's platform).
    overrides: Mapping[str, FeatureValue] = field(default_factory=dict)
    # The caller's own budget; the service uses the tighter of this and its own.
    deadline_ms: float | None = None
    request_id: str | None = None
    # When the login reached the edge, on time.perf_counter()'s clock (the ingress stamps it,
    # counting any wait a front proxy reports). The budget runs from there, not from when
    # the service first sees the query. None: from now.
    started: float | None = None


@dataclass(frozen=True)
class OfferAnswer:
    request_id: str
    game: str
    version: str
    decision: OfferDecision
    fallback_reason: FallbackReason | None
    tier: Tier
    answered_members: list[str]
    missing_members: dict[str, str]
    members_total: int
    features_ms: float
    fanout_ms: float
    total_ms: float

    @property
    def personalized(self) -> bool:
        """Scored online from the player's current features (a precomputed offer is not)."""
        return self.fallback_reason is None


# The metrics' `outcome` label of each tier (app.contract.metrics.ANSWERS).
_OUTCOME = {Tier.ONLINE: "personalized", Tier.PRECOMPUTED: "precomputed", Tier.DEFAULT: "fallback"}


class OfferService:
    def __init__(
        self,
        manifest: Manifest,
        features: FeatureSource,
        scorer: EnsembleScorer,
        *,
        request_budget_ms: float,
        quorum: float,
        telemetry: Telemetry | None = None,
        precomputed: PrecomputedTier | None = None,
    ) -> None:
        self.manifest = manifest
        self._telemetry = telemetry or NoTelemetry()
        self.catalog = OfferCatalog(manifest)
        # Empty until a snapshot is installed (the supervisor loads one in the background).
        self.precomputed = precomputed or PrecomputedTier(DEFAULT_PRECOMPUTED_MAX_AGE_S)
        self._features = features
        self._scorer = scorer
        self.configure(request_budget_ms=request_budget_ms, quorum=quorum)
        self._fallbacks = TallyLog(logger, "fallback answers")

    def configure(
        self,
        *,
        request_budget_ms: float,
        quorum: float,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        """Live knobs (the replica's reconfigure); logins in flight keep their own budget.

        `weights`: member name -> live weight, for the quorum's denominator (the scorer applies
        the same weights to the answers it returns).
        """
        if request_budget_ms <= 0:
            raise ValueError(f"request_budget_ms must be positive, got {request_budget_ms}")
        if not 0.0 <= quorum <= 1.0:
            raise ValueError(f"quorum is a share of the ensemble's weight, got {quorum}")
        live = weights or {}
        total = sum(live.get(e.name, e.weight) for e in self.manifest.members)
        if total <= 0:
            raise ValueError("member weights must leave a positive total")
        self._budget_ms = request_budget_ms
        self._quorum = quorum
        self._total_weight = total

    @property
    def budget_ms(self) -> float:
        return self._budget_ms

    @property
    def game(self) -> str:
        return self.manifest.game

    @property
    def version(self) -> str:
        return self.manifest.version

    async def recommend(self, query: OfferQuery) -> OfferAnswer:
        """One offer for one player login; always an answer, personalized or a flagged fallback.

        Raises:
            UnknownGame: the query's game is not this application's game.
            BudgetSpentBeforeStart: the whole budget went before the query got here.
        """
        if query.game != self.game:
            raise UnknownGame(query.game)
        self._fallbacks.tick()
        budget_ms = self._budget_ms
        if query.deadline_ms is not None:
            budget_ms = min(budget_ms, query.deadline_ms)
        deadline = (
            Deadline.start(budget_ms)
            if query.started is None
            else Deadline(query.started, budget_ms / 1000.0)
        )
        if deadline.remaining_s() <= 0.0:
            raise BudgetSpentBeforeStart(deadline.elapsed_ms(), budget_ms)
        request_id = query.request_id or uuid.uuid4().hex

        reason: FallbackReason | None = None
        # A cached row is taken at once: no read, and no trip through the event loop.
        row = self._features.cached_row(query.player_id, query.overrides)
        self._telemetry.cache_lookup(row is not None)
        if row is None:
            row, reason = await self._read_row(query, deadline, budget_ms)
        features_ms = deadline.elapsed_ms()

        if row is None:
            return self._fallback(query.player_id, request_id, reason, None, deadline, features_ms)

        candidates = self.catalog.candidates(row)
        result = await self._scorer.score(candidates, deadline.remaining_s())
        answered_weight = sum(a.weight for a in result.answers)
        if not result.answers or answered_weight < self._quorum * self._total_weight:
            reason = FallbackReason.QUORUM if result.answers else FallbackReason.NO_MEMBERS_ANSWERED
            self._fallbacks.record(reason, f"missing {result.missing}")
            return self._fallback(
                query.player_id, request_id, reason, result, deadline, features_ms
            )
        decision = self.catalog.decide(weighted_mean(result.answers))
        return self._answer(request_id, decision, None, Tier.ONLINE, result, deadline, features_ms)

    def _fallback(
        self,
        player_id: str,
        request_id: str,
        reason: FallbackReason | None,
        fanout: FanoutResult | None,
        deadline: Deadline,
        features_ms: float,
    ) -> OfferAnswer:
        """The player's precomputed offer if the tier covers `reason` and has one, else the
        default offer. `reason` stays the online failure either way."""
        decision = self.precomputed.lookup(player_id) if reason in PRECOMPUTED_COVERS else None
        if decision is not None:
            return self._answer(
                request_id, decision, reason, Tier.PRECOMPUTED, fanout, deadline, features_ms
            )
        return self._answer(
            request_id, self.catalog.fallback(), reason, Tier.DEFAULT, fanout, deadline, features_ms
        )

    async def _read_row(
        self, query: OfferQuery, deadline: Deadline, budget_ms: float
    ) -> tuple[np.ndarray | None, FallbackReason | None]:
        try:
            # The read gets what is left of the budget, no more: a slow (not down) table must
            # not hold the login past its deadline and then blame the members for it.
            row = await asyncio.wait_for(
                self._features.player_row(query.player_id, query.overrides),
                timeout=deadline.remaining_s(),
            )
        except FeatureStoreUnavailable as exc:
            self._fallbacks.record(FallbackReason.FEATURE_STORE_UNAVAILABLE, str(exc))
            return None, FallbackReason.FEATURE_STORE_UNAVAILABLE
        except TimeoutError:
            detail = f"no feature read within {budget_ms:.0f} ms"
            self._fallbacks.record(FallbackReason.FEATURE_STORE_UNAVAILABLE, detail)
            return None, FallbackReason.FEATURE_STORE_UNAVAILABLE
        return row, None if row is not None else FallbackReason.UNKNOWN_PLAYER

    def close(self) -> None:
        """Write the pending fallback tally (replica shutdown)."""
        self._fallbacks.flush()

    async def warm_up(self, budget_s: float, scorer: EnsembleScorer | None = None) -> FanoutResult:
        """Route one candidate matrix (schema defaults) through every member.

        The first call through a Serve handle has to discover the member's replicas; doing it
        at start-up keeps that cost out of the first players' budgets. `scorer` (default: the
        service's own) lets the caller warm up without a straggler grace, which would cut
        off the members still starting.
        """
        defaults = self.manifest.feature_schema.encode_record({})
        return await (scorer or self._scorer).score(self.catalog.candidates(defaults), budget_s)

    def _answer(
        self,
        request_id: str,
        decision: OfferDecision,
        reason: FallbackReason | None,
        tier: Tier,
        fanout: FanoutResult | None,
        deadline: Deadline,
        features_ms: float,
    ) -> OfferAnswer:
        total_ms = deadline.elapsed_ms()
        telemetry = self._telemetry
        telemetry.answer(
            _OUTCOME[tier], "none" if reason is None else reason.value, total_ms
        )
        if fanout is not None:
            telemetry.members_answered(len(fanout.answers))
            for member, why in fanout.missing.items():
                telemetry.member_missing(member, why)
        return OfferAnswer(
            request_id=request_id,
            game=self.game,
            version=self.version,
            decision=decision,
            fallback_reason=reason,
            tier=tier,
            answered_members=[a.name for a in fanout.answers] if fanout else [],
            missing_members=dict(fanout.missing) if fanout else {},
            members_total=len(self.manifest.members),
            features_ms=features_ms,
            fanout_ms=fanout.elapsed_ms if fanout else 0.0,
            total_ms=total_ms,
        )
