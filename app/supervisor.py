"""The supervisor deployment: HTTP ingress that fans each login out to the members."""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI
from pydantic import BaseModel, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.fanout import Fanout
from app.feature_store import FeatureStore
from app.http_api import build_http_api
from app.manifest import load_manifest
from app.members import HandleMemberClient
from app.offer_service import OfferService
from app.settings import get_settings

logger = logging.getLogger("ray.serve")


class SupervisorConfig(BaseModel):
    version_dir: str
    request_budget_ms: float = Field(gt=0)
    warmup_timeout_s: float = Field(default=60.0, ge=0)


@serve.deployment
@serve.ingress()
class Supervisor:
    """Thin Serve wrapper: wires settings, feature store and member handles into OfferService."""

    async def __init__(
        self, config: SupervisorConfig, members: dict[str, DeploymentHandle]
    ) -> None:
        manifest = load_manifest(Path(config.version_dir))
        missing = {e.name for e in manifest.members} - members.keys()
        if missing:
            raise ValueError(f"no deployment handle for members {sorted(missing)}")
        clients = [HandleMemberClient(members[e.name], e) for e in manifest.members]
        store = FeatureStore(get_settings(), manifest.feature_schema, manifest.game)
        self._service = OfferService(
            manifest, store, Fanout(clients), request_budget_ms=config.request_budget_ms
        )
        # Not ready until every member has answered once (or the warm-up budget is spent):
        # members start alongside the supervisor, and a cold handle would eat real budgets.
        warm = await self._service.warm_up(config.warmup_timeout_s)
        if warm.missing:
            logger.warning(
                "members not warm after %.0fs: %s", config.warmup_timeout_s, warm.missing
            )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_http_api(self._service)
