"""The legacy baseline: the "before" system of the case study, for side-by-side benchmarks.

One web process loads every member of the manifest and scores them one after another for
each request, the way the Flask pods did. It reuses the service's feature store, offer
decision and HTTP API, so the only difference from the ensemble service is *where and how*
the members run. Run it with one worker per core:

    OFFERS_LEGACY_VERSION_DIR=models/artifacts/standard/galaxy-raiders/2026-11 \\
    OFFERS_DYNAMODB_ENDPOINT_URL=http://127.0.0.1:4567 \\
    AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \\
    .venv/bin/uvicorn loadtest.bench.legacy_server:create_app --factory --workers 2 \\
        --host 127.0.0.1 --port 8100 --no-access-log
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from fastapi import FastAPI
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.adapters.dynamodb import FeatureStore
from app.adapters.member_model import MemberModel
from app.api.routes import build_http_api
from app.config.app_args import EnsembleAppArgs
from app.config.settings import get_settings
from app.contract.manifest import load_manifest
from app.core.admission import AdmissionGate
from app.core.aggregation import MemberScores
from app.core.online.fanout import FanoutResult
from app.core.online.offer_service import OfferService


class LegacySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OFFERS_LEGACY_", extra="ignore")

    version_dir: Path
    # The ensemble's own default, so both systems give a login the same budget.
    request_budget_ms: float = Field(
        default=EnsembleAppArgs.model_fields["request_budget_ms"].default, gt=0
    )


class SequentialScorer:
    """Every member in this process, scored in manifest order, one after another.

    Like the legacy system it has no per-member deadline: a request waits for all members.
    """

    def __init__(self, models: Sequence[MemberModel]) -> None:
        self.models = tuple(models)

    async def score(self, matrix: np.ndarray, budget_s: float) -> FanoutResult:
        started = time.perf_counter()
        answers = [MemberScores(m.name, m.entry.weight, m.score(matrix)) for m in self.models]
        return FanoutResult(answers, {}, (time.perf_counter() - started) * 1000.0)


def create_app() -> FastAPI:
    """uvicorn factory: one call per worker process, each loading every member."""
    legacy = LegacySettings()
    version_dir = legacy.version_dir.resolve()
    manifest = load_manifest(version_dir)
    models = [MemberModel.load(entry, version_dir) for entry in manifest.members]
    # The legacy pods read one GetItem per login and cached nothing: the "before" design.
    settings = get_settings().model_copy(
        update={"feature_cache_ttl_s": 0.0, "dynamodb_batch_reads": False}
    )
    store = FeatureStore(settings, manifest.feature_schema, manifest.game)
    service = OfferService(
        manifest,
        store,
        SequentialScorer(models),
        request_budget_ms=legacy.request_budget_ms,
        # Every member always answers here (no deadline per member): quorum never binds.
        quorum=EnsembleAppArgs.model_fields["quorum"].default,
    )
    # Same URL layout as the Serve application, so one locustfile drives both systems.
    root = FastAPI(title="Dynamic Offers (legacy baseline)", docs_url=None, redoc_url=None)
    # The legacy pods had no admission control: a gate no load here reaches.
    api = build_http_api(service, admission=AdmissionGate(1_000_000), retry_after_s=1.0)
    root.mount(f"/{manifest.game}/{manifest.version}", api)
    return root
