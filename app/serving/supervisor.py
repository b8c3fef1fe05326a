"""The supervisor deployment: HTTP ingress that fans each login out to the members."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.adapters.dynamodb import FeatureStore
from app.api.routes import build_http_api
from app.config.app_args import CoalescingConfig
from app.config.settings import get_settings
from app.contract.manifest import load_manifest
from app.core.admission import AdmissionGate
from app.core.coalescing import CoalescingScorer
from app.core.fanout import EnsembleScorer, Fanout
from app.core.offer_service import OfferService
from app.serving.logs import route_service_logs_to_serve
from app.serving.member_group import HandleGroupClient

logger = logging.getLogger(__name__)


class SupervisorConfig(BaseModel):
    """What the builder hands each supervisor replica (every value comes from the app args)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version_dir: str
    request_budget_ms: float = Field(gt=0)
    quorum: float = Field(ge=0, le=1)
    straggler_grace_ms: float | None = Field(ge=0)
    # deployment name -> names of the members it hosts (app.serving.member_layout)
    groups: dict[str, list[str]]
    coalescing: CoalescingConfig
    max_in_flight: int = Field(ge=1)
    retry_after_s: float = Field(ge=0)
    warmup_timeout_s: float = Field(default=60.0, ge=0)


@serve.deployment
@serve.ingress()
class Supervisor:
    """Thin Serve wrapper: wires settings, feature store and member handles into OfferService."""

    # Serve awaits an async __init__: the replica is ready only once the warm-up is done.
    async def __init__(  # type: ignore[misc]
        self, config: SupervisorConfig, groups: dict[str, DeploymentHandle[Any]]
    ) -> None:
        route_service_logs_to_serve()
        manifest = load_manifest(Path(config.version_dir))
        entries = {e.name: e for e in manifest.members}
        hosted = [name for names in config.groups.values() for name in names]
        if sorted(hosted) != sorted(entries) or groups.keys() != config.groups.keys():
            raise ValueError(
                f"member groups {config.groups} do not host the manifest's members "
                f"{sorted(entries)} exactly once, or lack a handle ({sorted(groups)})"
            )
        clients = [
            HandleGroupClient(name, groups[name], [entries[m] for m in members])
            for name, members in config.groups.items()
        ]
        member_order = [e.name for e in manifest.members]
        fanout = Fanout(
            clients,
            member_order=member_order,
            quorum=config.quorum,
            straggler_grace_s=(
                None if config.straggler_grace_ms is None else config.straggler_grace_ms / 1000.0
            ),
        )
        self._coalescing: CoalescingScorer | None = None
        scorer: EnsembleScorer = fanout
        if config.coalescing.enabled:
            scorer = self._coalescing = CoalescingScorer(
                fanout,
                max_rows=config.coalescing.max_rows,
                max_in_flight=config.coalescing.max_in_flight,
                max_hold_s=config.coalescing.max_hold_ms / 1000.0,
            )
        self._admission = AdmissionGate(config.max_in_flight)
        self._retry_after_s = config.retry_after_s
        settings = get_settings()
        self._api_key_sha256 = settings.api_key_sha256
        self._store = FeatureStore(settings, manifest.feature_schema, manifest.game)
        self._closed = False
        self._service = OfferService(
            manifest,
            self._store,
            scorer,
            request_budget_ms=config.request_budget_ms,
            quorum=config.quorum,
        )
        # Not ready until every member has answered once (or the warm-up budget is spent)
        # and the feature store's client has made one real call: members start alongside
        # the supervisor, and cold handles or a cold client would eat real budgets.
        await self._store.warm_up()
        # Without the straggler grace: every member must answer once, however slowly it
        # starts, or the warm-up budget must run out.
        warm = await self._service.warm_up(
            config.warmup_timeout_s, scorer=Fanout(clients, member_order=member_order)
        )
        if warm.missing:
            logger.warning(
                "members not warm after %.0fs: %s", config.warmup_timeout_s, warm.missing
            )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_http_api(
            self._service,
            admission=self._admission,
            retry_after_s=self._retry_after_s,
            api_key_sha256=self._api_key_sha256,
        )

    def __del__(self) -> None:
        # Serve calls this once on graceful shutdown, on the replica's event-loop thread; the
        # garbage collector may call it again later, which must do nothing.
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if self._coalescing is not None:
            self._coalescing.close()
        self._store.close()
        service: OfferService | None = getattr(self, "_service", None)
        if service is not None:  # None if __init__ failed after creating the store
            service.close()
