"""The supervisor deployment: HTTP ingress that fans each login out to the members."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.adapters.dynamodb import FeatureStore
from app.adapters.host_cpu import IdleCpu
from app.adapters.member_model import InProcessGroupClient, load_group
from app.adapters.model_store import local_version
from app.adapters.snapshot_store import latest_snapshot
from app.api.routed_login import answer_routed_login
from app.api.routes import build_http_api
from app.config.app_args import PrecomputedArgs
from app.config.knobs import SupervisorKnobs, explain
from app.config.settings import get_settings
from app.contract.manifest import Manifest, Runtime, load_manifest
from app.core.admission import AdmissionGate
from app.core.load_meter import LoadMeter
from app.core.online.coalescing import CoalescingScorer
from app.core.online.fanout import EnsembleScorer, Fanout, MemberGroupClient
from app.core.online.loop_lag import LoopLag
from app.core.online.offer_service import OfferService
from app.core.online.precomputed import PrecomputedOffers, PrecomputedTier
from app.core.service_time_limit import ServiceTimeLimit
from app.serving.autoscaling import replica_stats
from app.serving.member_group import HandleGroupClient
from app.serving.replica_process import prepare_replica_process
from app.serving.telemetry import SupervisorTelemetry

logger = logging.getLogger(__name__)


class SupervisorConfig(BaseModel):
    """What the builder hands each supervisor replica (every value comes from the app args)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The version's folder, or its model store URI (s3://...): loaded via the node cache.
    version_dir: str
    # How the inline members are scored (EnsembleAppArgs.runtime).
    runtime: Runtime = "onnx"
    # The runtime knobs as the app's args set them; a live user_config is merged over these
    # (app.config.knobs). They are init args, so they only change with the args.
    knobs: SupervisorKnobs
    coalescing_enabled: bool
    # The members' batching.max_batch_rows: the ceiling of a live coalescing.max_rows.
    max_batch_rows: int = Field(ge=1)
    # deployment name -> names of the members it hosts (app.serving.member_layout)
    groups: dict[str, list[str]]
    # Members this replica scores itself, in-process (layout auto's inline placement).
    inline: list[str] = Field(default_factory=list)
    # Member -> where it is scored and, when planned, why (GET /v1/ensemble's `layout`).
    placements: dict[str, dict[str, Any]] = Field(default_factory=dict)
    max_in_flight: int = Field(ge=1)
    # The bound follows the measured service time, below max_in_flight (admission.adaptive),
    # and the edge queue's room with it; HAProxy lets a login wait up to queue_timeout_ms.
    adaptive_admission: bool = True
    queue_timeout_ms: int = Field(default=500, ge=1)
    retry_after_s: float = Field(ge=0)
    warmup_timeout_s: float = Field(default=60.0, ge=0)
    precomputed: PrecomputedArgs = Field(default_factory=PrecomputedArgs)


BREAKER_REPORT_S = 2.0
# How often a replica with no snapshot yet looks for the first one: `make run` builds it in
# the background minutes after the replicas start, and a fresh service should not wait a
# whole refresh interval to have its fallback tier.
FIRST_SNAPSHOT_POLL_S = 5.0
INLINE_CLIENT = "inline"


def _queue_wait_s(budget_ms: float, queue_timeout_ms: int) -> float:
    """The queue wait the adaptive bound counts on for a budget: HAProxy's queue timeout is
    fixed when the cluster starts, a live budget is not, and a wait of more than half a
    live budget would leave a login too little to be served in."""
    return min(queue_timeout_ms, budget_ms / 2) / 1000.0


def member_clients(
    config: SupervisorConfig,
    handles: dict[str, DeploymentHandle[Any]],
    manifest: Manifest,
    folder: Path,
) -> list[MemberGroupClient]:
    """One client per place a fan-out goes: each member deployment over its handle, and
    the members this replica scores itself (loaded here). Every member exactly once."""
    entries = {e.name: e for e in manifest.members}
    hosted = [name for names in config.groups.values() for name in names] + config.inline
    if sorted(hosted) != sorted(entries) or handles.keys() != config.groups.keys():
        raise ValueError(
            f"member groups {config.groups} and inline members {config.inline} do not host "
            f"the manifest's members {sorted(entries)} exactly once, or lack a handle "
            f"({sorted(handles)})"
        )
    clients: list[MemberGroupClient] = [
        HandleGroupClient(name, handles[name], [entries[m] for m in members])
        for name, members in config.groups.items()
    ]
    if config.inline:
        group = load_group(
            [entries[m] for m in config.inline],
            folder,
            config.runtime,
            manifest.fidelity,
        )
        clients.append(InProcessGroupClient(INLINE_CLIENT, group))
    return clients


async def _keep_precomputed_fresh(
    root: str, manifest: Manifest, tier: PrecomputedTier, service: OfferService, refresh_s: float
) -> None:
    """Load the newest snapshot, then look for a newer one every `refresh_s` (every
    FIRST_SNAPSHOT_POLL_S while there is none yet).

    The read and checksum run on a worker thread: a large snapshot must not stall logins or
    health checks, and the replica is ready before it is loaded (until then the tier is
    empty and failures get the default offer). A failure to look is logged and retried.
    """
    while True:
        current = tier.offers
        try:
            found = await asyncio.to_thread(
                latest_snapshot,
                root,
                manifest,
                max_age_s=tier.max_age_s,
                newer_than_s=None if current is None else current.scored_at_s,
            )
        except Exception:  # noqa: BLE001 - a storage error must not end the refresh loop
            logger.exception("could not look for precomputed snapshots under %s", root)
            found = None
        if found is not None:
            snapshot, path = found
            tier.install(PrecomputedOffers(snapshot, service.catalog, path))
            header = snapshot.header
            logger.info(
                "precomputed offers loaded: %d players scored at %s, %.1f bytes/player, from %s",
                header.players,
                header.scored_at.isoformat(),
                snapshot.nbytes / max(header.players, 1),
                path,
            )
        await asyncio.sleep(
            refresh_s if tier.offers is not None else min(refresh_s, FIRST_SNAPSHOT_POLL_S)
        )


async def _report_breaker(store: FeatureStore, telemetry: SupervisorTelemetry) -> None:
    while True:
        telemetry.breaker(store.breaker_state)
        await asyncio.sleep(BREAKER_REPORT_S)


@serve.deployment
@serve.ingress()
class Supervisor:
    """Thin Serve wrapper: wires settings, feature store and member handles into OfferService."""

    # Serve awaits an async __init__: the replica is ready only once the warm-up is done.
    async def __init__(  # type: ignore[misc]
        self, config: SupervisorConfig, groups: dict[str, DeploymentHandle[Any]]
    ) -> None:
        started = time.perf_counter()
        steps: dict[str, float] = {}
        self._startup_ms = steps  # filled below; GET /v1/ensemble shows it

        def step(name: str) -> None:
            steps[name] = round((time.perf_counter() - started) * 1000.0 - sum(steps.values()), 1)

        prepare_replica_process()
        step("process set-up")
        folder = local_version(config.version_dir)  # a store URI: this node's cached copy
        manifest = load_manifest(folder)
        step("artifacts (node cache), manifest")
        clients = member_clients(config, groups, manifest, folder)
        step("members (verify, load, fidelity check)")
        self._inline = next((c for c in clients if isinstance(c, InProcessGroupClient)), None)
        self._placements = config.placements
        member_order = [e.name for e in manifest.members]
        telemetry = SupervisorTelemetry(manifest.game, manifest.version)
        baseline = config.knobs
        self._baseline = baseline
        self._trained_weights = {e.name: e.weight for e in manifest.members}
        self._max_batch_rows = config.max_batch_rows
        self._fanout = Fanout(clients, member_order=member_order, telemetry=telemetry)
        # Logins held over the admission bound: what this deployment autoscales on.
        self._load = LoadMeter(config.max_in_flight)
        self._idle = IdleCpu()
        # Its own loop's lag tells overload from waiting (app.core.online.loop_lag).
        self._loop_lag = LoopLag()
        self._loop_lag_task = asyncio.get_running_loop().create_task(self._loop_lag.run())
        self._limit = (
            ServiceTimeLimit(
                ceiling=config.max_in_flight,
                budget_s=baseline.request_budget_ms / 1000.0,
                queue_wait_s=_queue_wait_s(baseline.request_budget_ms, config.queue_timeout_ms),
                loop_lag_s=self._loop_lag.recent_s,
            )
            if config.adaptive_admission
            else None
        )
        self._queue_timeout_ms = config.queue_timeout_ms
        self._admission = AdmissionGate(config.max_in_flight, load=self._load, limit=self._limit)
        self._coalescing: CoalescingScorer | None = None
        scorer: EnsembleScorer = self._fanout
        if config.coalescing_enabled:
            scorer = self._coalescing = CoalescingScorer(
                self._fanout,
                max_rows=baseline.coalescing.max_rows,
                max_in_flight=baseline.coalescing.max_in_flight,
                max_hold_s=baseline.coalescing.max_hold_ms / 1000.0,
                alone=self._admission.alone,
            )
        self._retry_after_s = config.retry_after_s
        settings = get_settings()
        self._api_key_sha256 = settings.api_key_sha256
        self._store = FeatureStore(
            settings, manifest.feature_schema, manifest.game, telemetry=telemetry
        )
        # The breaker gauge stays exported even while every login is a cache hit.
        self._breaker_task = asyncio.get_running_loop().create_task(
            _report_breaker(self._store, telemetry)
        )
        self._closed = False
        tier = PrecomputedTier(config.precomputed.max_age_s)
        self._service = OfferService(
            manifest,
            self._store,
            scorer,
            request_budget_ms=baseline.request_budget_ms,
            quorum=baseline.quorum,
            telemetry=telemetry,
            precomputed=tier,
        )
        self._precomputed_task: asyncio.Task[None] | None = None
        if config.precomputed.enabled:
            self._precomputed_task = asyncio.get_running_loop().create_task(
                _keep_precomputed_fresh(
                    settings.batch_output_uri,
                    manifest,
                    tier,
                    self._service,
                    config.precomputed.refresh_s,
                )
            )
        self._knobs = baseline
        self._knobs_rejected: str | None = None
        self._apply(baseline)
        # Not ready until every member has answered once (or the warm-up budget is spent)
        # and the feature store's client has made one real call: members start alongside
        # the supervisor, and cold handles or a cold client would eat real budgets.
        step("service")
        await self._store.warm_up()
        step("feature store warm-up")
        # Without the straggler grace: every member must answer once, however slowly it
        # starts, or the warm-up budget must run out.
        warm = await self._service.warm_up(
            config.warmup_timeout_s, scorer=Fanout(clients, member_order=member_order)
        )
        if warm.missing:
            logger.warning(
                "members not warm after %.0fs: %s", config.warmup_timeout_s, warm.missing
            )
        step("members warm-up")
        # Where a replica's start goes, step by step (docs/reliability.md, start-up).
        logger.info(
            "supervisor ready in %.0f ms (runtime %s): %s",
            sum(steps.values()),
            config.runtime,
            ", ".join(f"{k} {v:.0f} ms" for k, v in steps.items()),
        )

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metrics (app.serving.autoscaling)."""
        return replica_stats(self._load, self._idle)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Live knobs (Serve's user_config), merged over the args' baseline.

        Async, so Serve runs it on the replica's event loop (a sync one would run in a worker
        thread, racing the logins that read the knobs). Never raises: Serve would mark the
        replica failed and start it again with the same config, a restart loop. A change that
        does not validate is logged and refused, the replica keeps what it had, and
        GET /v1/ensemble shows the refusal.
        """
        try:
            knobs = self._baseline.merged(user_config).checked(
                self._trained_weights, self._max_batch_rows
            )
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            self._knobs_rejected = f"{user_config!r}: {explain(exc)}"
            logger.error("refused knobs change, keeping %s: %s", self._knobs, self._knobs_rejected)
            return
        try:
            self._apply(knobs)
        except Exception as exc:  # noqa: BLE001 - a bug here must not restart-loop the replica
            self._knobs_rejected = f"{user_config!r}: {type(exc).__name__}: {exc}"
            logger.exception("could not apply knobs %s; keeping %s", knobs, self._knobs)
            self._apply(self._knobs)
            return
        self._knobs_rejected = None
        logger.info("knobs applied: %s", knobs.model_dump())

    def _apply(self, knobs: SupervisorKnobs) -> None:
        weights = knobs.weights(self._trained_weights)
        grace = knobs.straggler_grace_ms
        self._fanout.configure(
            quorum=knobs.quorum,
            straggler_grace_s=None if grace is None else grace / 1000.0,
            weights=weights,
        )
        if self._coalescing is not None:
            self._coalescing.configure(
                max_rows=knobs.coalescing.max_rows,
                max_in_flight=knobs.coalescing.max_in_flight,
                max_hold_s=knobs.coalescing.max_hold_ms / 1000.0,
            )
        self._service.configure(
            request_budget_ms=knobs.request_budget_ms, quorum=knobs.quorum, weights=weights
        )
        if self._inline is not None:
            # The members of a group wait for its slowest one, in-process as in a deployment.
            delays = knobs.faults.slow_members_ms
            self._inline.delay_s = (
                max((delays.get(m.name, 0.0) for m in self._inline.members), default=0.0) / 1000
            )
        if self._limit is not None:
            budget_ms = knobs.request_budget_ms
            self._limit.retarget(
                budget_ms / 1000.0, _queue_wait_s(budget_ms, self._queue_timeout_ms)
            )
        self._knobs = knobs

    def _knobs_view(self) -> tuple[dict[str, Any], str | None]:
        return self._knobs.model_dump(mode="json"), self._knobs_rejected

    async def route_offer(
        self,
        payload: dict[str, Any],
        request_id: str | None = None,
        wait_ms: float = 0.0,
        sent_at_unix_s: float | None = None,
    ) -> dict[str, Any]:
        """A login from the game's version router (a handle call, not HTTP): the same
        answer as POST /v1/offers, as a dict (app.api.routed_login). `wait_ms`: how long it
        may wait here for a slot if this replica is full; `sent_at_unix_s`: when the router
        sent it, where its budget starts."""
        return await answer_routed_login(
            self._service,
            self._admission,
            payload,
            request_id=request_id,
            retry_after_s=self._retry_after_s,
            wait_ms=wait_ms,
            sent_at_unix_s=sent_at_unix_s,
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_http_api(
            self._service,
            admission=self._admission,
            retry_after_s=self._retry_after_s,
            api_key_sha256=self._api_key_sha256,
            knobs=self._knobs_view,
            layout=self._placements,
            startup_ms=self._startup_ms,
        )

    def __del__(self) -> None:
        # Serve calls this once on graceful shutdown, on the replica's event-loop thread; the
        # garbage collector may call it again later, which must do nothing.
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for name in ("_breaker_task", "_precomputed_task"):
            task = getattr(self, name, None)
            if task is not None:
                task.cancel()
        if self._coalescing is not None:
            self._coalescing.close()
        if self._inline is not None:
            self._inline.close()
        self._store.close()
        service: OfferService | None = getattr(self, "_service", None)
        if service is not None:  # None if __init__ failed after creating the store
            service.close()
