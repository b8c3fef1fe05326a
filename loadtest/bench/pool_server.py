"""The `pool` peer: the strongest single-machine alternative to Ray Serve for this service.

The MLPool pattern: one async web process hands scoring to a pool of worker processes, one
per core, each holding every member. It gets every software lever the ensemble has that has
nothing to do with Ray: the same feature store with its TTL cache, single-flight and batched
reads, the same cross-request coalescing (one pool job per batch of concurrent logins), the
same budget, quorum, admission gate and HTTP API. What it lacks is what Ray adds: members
that scale apart from each other, replicas on other machines, and fault isolation between
members.

    OFFERS_POOL_VERSION_DIR=models/artifacts/standard/galaxy-raiders/2026-11 \\
    OFFERS_DYNAMODB_ENDPOINT_URL=http://127.0.0.1:4567 \\
    AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \\
    .venv/bin/uvicorn loadtest.bench.pool_server:create_app --factory --workers 1 \\
        --host 127.0.0.1 --port 8200 --no-access-log
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from fastapi import FastAPI
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.adapters.dynamodb import FeatureStore
from app.adapters.member_model import MemberGroupModel, load_group
from app.api.routes import build_http_api
from app.config.app_args import CoalescingConfig, EnsembleAppArgs
from app.config.settings import get_settings
from app.contract.manifest import Runtime, load_manifest
from app.core.admission import AdmissionGate
from app.core.online.coalescing import CoalescingScorer
from app.core.online.fanout import Fanout, MemberRef
from app.core.online.offer_service import OfferService

_ARGS = EnsembleAppArgs.model_fields


class PoolSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OFFERS_POOL_", extra="ignore")

    version_dir: Path
    # As users run the pool today: each library's own predict. `pool-compiled`: onnx.
    runtime: Runtime = "native"
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    # The ensemble's own defaults, so both give a login the same budget and rules.
    request_budget_ms: float = Field(default=_ARGS["request_budget_ms"].default, gt=0)
    quorum: float = Field(default=_ARGS["quorum"].default, ge=0, le=1)
    straggler_grace_ms: float = Field(default=_ARGS["straggler_grace_ms"].default, ge=0)
    # Logins taken on at once before a fast 503: the shipped ensemble's total, two
    # supervisor replicas x admission.max_in_flight 16.
    max_in_flight: int = Field(default=32, ge=1)


# --- the worker processes -----------------------------------------------------------------

_members: MemberGroupModel | None = None


def _load_members(version_dir: str, runtime: Runtime) -> None:
    """Pool initializer: every member in this worker process (one predict thread)."""
    global _members
    manifest = load_manifest(Path(version_dir))
    _members = load_group(manifest.members, Path(version_dir), runtime, manifest.fidelity)


def _score(matrix: np.ndarray) -> np.ndarray:
    """Shape (members, rows): every member of the manifest, one after another."""
    assert _members is not None, "pool worker started without its initializer"
    return _members.score(matrix)


class PoolGroup:
    """A MemberGroupClient that scores every member in one job on the process pool."""

    name = "pool"

    def __init__(self, pool: ProcessPoolExecutor, members: tuple[MemberRef, ...]) -> None:
        self.members = members
        self._pool = pool

    async def score(self, matrix: np.ndarray) -> np.ndarray:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, _score, matrix)


# --- the web process ----------------------------------------------------------------------


def create_app() -> FastAPI:
    """uvicorn factory (run with --workers 1: the pool is the parallelism)."""
    pool_settings = PoolSettings()
    version_dir = pool_settings.version_dir.resolve()
    manifest = load_manifest(version_dir)
    # spawn, not fork: the web process has threads (boto3, the event loop) by the time the
    # pool starts its workers.
    pool = ProcessPoolExecutor(
        max_workers=pool_settings.workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_load_members,
        initargs=(str(version_dir), pool_settings.runtime),
    )
    members = tuple(MemberRef(e.name, e.weight) for e in manifest.members)
    fanout = Fanout(
        [PoolGroup(pool, members)],
        member_order=[e.name for e in manifest.members],
        quorum=pool_settings.quorum,
        straggler_grace_s=pool_settings.straggler_grace_ms / 1000.0,
    )
    coalescing = CoalescingConfig()
    # One batch per worker in flight: logins arriving while every worker is busy join the
    # next batch, exactly like the ensemble's coalescer in front of its member replicas.
    scorer = CoalescingScorer(
        fanout,
        max_rows=coalescing.max_rows,
        max_in_flight=pool_settings.workers,
        max_hold_s=coalescing.max_hold_ms / 1000.0,
    )
    # Shipped read path: TTL cache, single flight, one BatchGetItem per batch of logins.
    store = FeatureStore(get_settings(), manifest.feature_schema, manifest.game)
    service = OfferService(
        manifest,
        store,
        scorer,
        request_budget_ms=pool_settings.request_budget_ms,
        quorum=pool_settings.quorum,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Ready only once every worker has loaded the members and scored once: workers
        # start on demand, so ask for as many concurrent jobs as there are workers.
        await store.warm_up()
        defaults = manifest.feature_schema.encode_record({})
        matrix = service.catalog.candidates(defaults)
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(pool, _score, matrix) for _ in range(pool_settings.workers))
        )
        yield
        scorer.close()
        store.close()
        service.close()
        pool.shutdown(wait=False, cancel_futures=True)

    root = FastAPI(
        title="Dynamic Offers (pool peer)", docs_url=None, redoc_url=None, lifespan=lifespan
    )
    api = build_http_api(
        service,
        admission=AdmissionGate(pool_settings.max_in_flight),
        retry_after_s=EnsembleAppArgs.model_fields["retry_after_s"].default,
    )
    root.mount(f"/{manifest.game}/{manifest.version}", api)
    return root
