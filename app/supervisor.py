"""The supervisor deployment: HTTP ingress that fans each login out to the members."""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.coalescing import CoalescingScorer
from app.fanout import EnsembleScorer, Fanout
from app.feature_store import FeatureStore
from app.http_api import build_http_api
from app.manifest import load_manifest
from app.members import HandleGroupClient
from app.offer_service import OfferService
from app.settings import get_settings

logger = logging.getLogger("ray.serve")


class CoalescingConfig(BaseModel):
    """Cross-request batching at the supervisor: one fan-out per batch of logins."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # Keep at or below the members' max_batch_rows so one round is one predict per member.
    max_rows: int = Field(default=512, ge=1)
    # Rounds in flight at once; logins arriving while all are busy join the next round.
    max_in_flight: int = Field(default=2, ge=1, le=64)
    # A round stops counting as in flight after this long even if a member has not
    # answered, so one slow member cannot stall the queue (its callers still wait for it
    # until their own deadlines).
    max_hold_ms: float = Field(default=100.0, gt=0, le=10_000)


class SupervisorConfig(BaseModel):
    version_dir: str
    request_budget_ms: float = Field(gt=0)
    # deployment name -> names of the members it hosts (app.member_groups)
    groups: dict[str, list[str]]
    coalescing: CoalescingConfig = Field(default_factory=CoalescingConfig)
    quorum: float = Field(default=0.0, ge=0, le=1)
    warmup_timeout_s: float = Field(default=60.0, ge=0)


@serve.deployment
@serve.ingress()
class Supervisor:
    """Thin Serve wrapper: wires settings, feature store and member handles into OfferService."""

    async def __init__(self, config: SupervisorConfig, groups: dict[str, DeploymentHandle]) -> None:
        manifest = load_manifest(Path(config.version_dir))
        entries = {e.name: e for e in manifest.members}
        hosted = [name for names in config.groups.values() for name in names]
        if sorted(hosted) != sorted(entries) or groups.keys() != config.groups.keys():
            raise ValueError(
                f"member groups {config.groups} do not host the manifest's members "
                f"{sorted(entries)} exactly once, or lack a handle ({sorted(groups)})"
            )
        fanout = Fanout(
            [
                HandleGroupClient(name, groups[name], [entries[m] for m in members])
                for name, members in config.groups.items()
            ],
            member_order=[e.name for e in manifest.members],
        )
        scorer: EnsembleScorer = fanout
        if config.coalescing.enabled:
            scorer = CoalescingScorer(
                fanout,
                max_rows=config.coalescing.max_rows,
                max_in_flight=config.coalescing.max_in_flight,
                max_hold_s=config.coalescing.max_hold_ms / 1000.0,
            )
        settings = get_settings()
        self._api_key_sha256 = settings.api_key_sha256
        store = FeatureStore(settings, manifest.feature_schema, manifest.game)
        self._service = OfferService(
            manifest,
            store,
            scorer,
            request_budget_ms=config.request_budget_ms,
            quorum=config.quorum,
        )
        # Not ready until every member has answered once (or the warm-up budget is spent):
        # members start alongside the supervisor, and a cold handle would eat real budgets.
        warm = await self._service.warm_up(config.warmup_timeout_s)
        if warm.missing:
            logger.warning(
                "members not warm after %.0fs: %s", config.warmup_timeout_s, warm.missing
            )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_http_api(self._service, api_key_sha256=self._api_key_sha256)
