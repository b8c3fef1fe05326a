"""The router deployment: a game's front door, `POST /<game>/v1/offers`, over its versions.

Thin Serve wrapper around app.core.routing.offer_routing.OfferRouter: version weights are its
live user_config (reconfigure), and so is the set of versions: a weight for a version the args
do not list adds it, reached at its default application (`<game>-<version>`), so a release adds
a version without restarting the router (a one-replica router restarted by Serve leaves the
game's route without a replica for seconds: docs/release.md). Versions are reached through
handles to their applications' supervisors, and a background task follows the applications'
status so that a version with no supervisor replica to answer (missing, going away, or every
replica down) is skipped at once instead of eating a login's budget. The same status gives each
version's running supervisors and the router's own replicas, from which the router knows how
many logins a version can take from it (app.core.routing.version_load). Each replica reports the
logins it holds over its edge bound (utilization) and the host's idle cores, so the router
autoscales like the supervisors (app.serving.autoscaling): HAProxy lets at most that bound into
one replica, so Serve's count of ongoing requests against a target above it could never add one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from app.adapters.host_cpu import IdleCpu
from app.api.game_routes import build_router_api
from app.api.schemas import SplitInfo, VersionShare
from app.config.knobs import RouterKnobs, explain
from app.config.settings import get_settings
from app.contract.ids import VERSION_PATTERN
from app.core.load_meter import LoadMeter
from app.core.routing.offer_routing import (
    OfferRouter,
    VersionHealth,
    VersionUnavailable,
    unavailable_reason,
)
from app.core.routing.version_load import VersionLoad
from app.core.routing.version_split import VersionSplit
from app.serving.autoscaling import replica_stats
from app.serving.replica_process import prepare_replica_process
from app.serving.telemetry import RouterTelemetry

logger = logging.getLogger(__name__)

STATUS_POLL_S = 2.0
# While a version has no supervisor that can answer (still deploying, or every replica down),
# its logins are sent elsewhere or refused on the last status read. Read again soon, so that a
# version is tried again within this of Serve having it running: at 2 s, a login right after
# `serve deploy` reported RUNNING could still be refused by a read from while it deployed.
STATUS_POLL_UNAVAILABLE_S = 0.25


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    game: str
    # version -> its Serve application (stable first)
    applications: dict[str, str]
    # The live knobs as the args set them; a user_config is merged over these.
    knobs: RouterKnobs
    ingress_deployment: str
    retry_after_s: float = Field(ge=0)
    # Logins HAProxy lets into one router replica at once (its maxconn, the admission bound).
    max_in_flight: int = Field(ge=1)
    # How long a login may wait for room, in HAProxy's queue and for a version's slot in the
    # router together (the edge's `timeout queue`; app.core.routing.version_load).
    queue_timeout_ms: float = Field(default=0.0, ge=0)


def read_serve_details() -> dict[str, Any]:
    """Serve's details as its controller sends them: the dict the REST API serves as JSON.

    Not `serve.status()`: that parses the same dict into pydantic models first, and their
    validators cloudpickle each deployment's request router class. With five applications
    (13 deployments) that took 258 ms of CPU per read here against 2.4 ms for the dict
    (docs/runs/performance.md, run AA), in a thread whose GIL the router's event loop waits
    for: an eighth of a core at the long interval, and half of one at the short interval,
    while a version is down and its logins most need a fast refusal or a failover. It grows
    with every application on the cluster, the other games' included."""
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    return client.get_serve_details() if client is not None else {}


def version_health(details: dict[str, Any], ingress: str) -> dict[str, VersionHealth]:
    """Serve's details (read_serve_details) as each application's status and the RUNNING
    replicas of its ingress deployment."""
    return {
        name: VersionHealth(_value(app.get("status", "")), running_replicas(details, name, ingress))
        for name, app in (details.get("applications") or {}).items()
    }


def running_replicas(details: dict[str, Any], application: str, deployment: str) -> int:
    """RUNNING replicas of one deployment in Serve's details (0 if it is not there)."""
    app = (details.get("applications") or {}).get(application) or {}
    found = (app.get("deployments") or {}).get(deployment) or {}
    return sum(
        1 for replica in found.get("replicas") or () if _value(replica.get("state")) == "RUNNING"
    )


def _value(enum_or_str: Any) -> str:
    return str(getattr(enum_or_str, "value", enum_or_str))


def replicas_the_handle_sees(handle: DeploymentHandle[Any]) -> int | None:
    """How many replicas the handle's own router would send a call to now, or None where it
    cannot say (no call through it yet, or the controller never told it of a running one).

    The handle learns a replica died from its own calls (each that the dead replica held
    fails, and so does a routing attempt's probe of it) before the controller notices and
    the router's next status read shows it: about a second after every supervisor of a
    version was killed the handle sees none, while the status still says RUNNING. A call
    made then is held by the handle until a replacement runs, seconds later: the login waited
    out its try's share of the budget before another version was tried (make reliability,
    version_down, run AB: 44-149 logins a run rerouted on a timeout, up to 87 refused).

    Reads Serve's private router state (ray 2.60: the request router's `curr_replicas`);
    if that shape changes this says None and the router falls back on the status read and
    its breaker, and tests/integration/serving/test_reliability.py fails on it."""
    if not handle.running_replicas_populated():
        return None
    request_router = getattr(
        getattr(handle._router, "_asyncio_router", None), "_request_router", None
    )
    replicas = getattr(request_router, "curr_replicas", None)
    return len(replicas) if isinstance(replicas, dict) else None


class HandleBackend:
    """Versions reached through handles to their supervisors, skipped while none can answer."""

    def __init__(
        self,
        applications: dict[str, str],
        ingress: str,
        own: tuple[str, str] | None = None,
        read_status: Callable[[], dict[str, Any]] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._applications = applications
        self._read_status = read_status or read_serve_details
        self._sleep = sleep
        # Called after each status read (the router's VersionLoad.refresh).
        self.on_read: Callable[[], None] = lambda: None
        # Called with each version a status read shows up after the read before showed it
        # down (the router's OfferRouter.version_up).
        self.on_up: Callable[[str], None] = lambda version: None
        self._ingress = ingress
        # (application, deployment) of the router itself: its replicas share the versions.
        self._own = own
        self.routers = 1
        self._handles: dict[str, DeploymentHandle[Any]] = {
            version: DeploymentHandle(ingress, app) for version, app in applications.items()
        }
        # application -> its health, refreshed by follow_status(); empty until the first read,
        # and then every version is tried.
        self.health: dict[str, VersionHealth] = {}

    async def offer(
        self, version: str, payload: dict[str, Any], request_id: str | None, wait_ms: float = 0.0
    ) -> dict[str, Any]:
        app = self._applications[version]
        why = unavailable_reason(self.health.get(app)) if self.health else None
        if why is not None:
            raise VersionUnavailable(f"application {app}: {why}")
        handle = self._handles[version]
        if replicas_the_handle_sees(handle) == 0:
            raise VersionUnavailable(f"application {app}: every supervisor this router knew died")
        try:
            # Stamped as it leaves: the version's budget runs from here (app.api.routed_login).
            reply: dict[str, Any] = await handle.route_offer.remote(
                payload, request_id, wait_ms, time.time()
            )
        except BackPressureError as exc:
            # The version's replicas and queues are full: overloaded, not down. Refused like
            # a supervisor's own 503, so the router neither spills it onto another version
            # nor counts it against the version (app.core.routing.version_breaker).
            refusal: dict[str, Any] = {"status": 503, "detail": f"version {version} overloaded"}
            if exc.retry_after_s is not None:
                refusal["retry_after_s"] = exc.retry_after_s
            return refusal
        return reply

    @property
    def applications(self) -> dict[str, str]:
        """version -> its Serve application, the args' and any added live."""
        return dict(self._applications)

    def add(self, version: str, app: str) -> None:
        """Reach one more version (a release adds it through the router's user_config)."""
        self._applications[version] = app
        self._handles[version] = DeploymentHandle(self._ingress, app)

    def replicas(self, version: str) -> int | None:
        """The version's running supervisor replicas, as last read (None: not read yet)."""
        health = self.health.get(self._applications[version])
        return health.running if health is not None else None

    def poll_interval_s(self) -> float:
        """How long until the next status read: short while a deployed version has no
        supervisor running yet (deploying, or its replicas restarting) or the status was
        never read, so it is tried again soon after it can answer. A version whose
        application is not deployed at all is read at the long interval: it may stay so."""
        if not self.health:
            return STATUS_POLL_UNAVAILABLE_S
        for app in self._applications.values():
            health = self.health.get(app)
            if health is not None and unavailable_reason(health) is not None:
                return STATUS_POLL_UNAVAILABLE_S
        return STATUS_POLL_S

    def _came_up(
        self, before: dict[str, VersionHealth], after: dict[str, VersionHealth]
    ) -> list[str]:
        """The versions `before` showed unable to answer and `after` shows able (none on the
        first read: nothing was shown down yet)."""
        if not before:
            return []
        return [
            version
            for version, app in self._applications.items()
            if unavailable_reason(before.get(app)) is not None
            and unavailable_reason(after.get(app)) is None
        ]

    async def follow_status(self) -> None:
        while True:
            try:
                details = await asyncio.to_thread(self._read_status)
                health = version_health(details, self._ingress)
                came_up = self._came_up(self.health, health)
                self.health = health
                if self._own is not None:
                    self.routers = max(1, running_replicas(details, *self._own))
                self.on_read()
                for version in came_up:
                    self.on_up(version)
            except Exception as exc:  # noqa: BLE001 - keep the last known status; retry
                logger.warning("could not read Serve's application status: %s", exc)
                await self._sleep(STATUS_POLL_S)
                continue
            await self._sleep(self.poll_interval_s())


@serve.deployment
@serve.ingress()
class VersionRouter:
    def __init__(self, config: RouterConfig) -> None:
        prepare_replica_process()
        self._config = config
        self._versions = list(config.applications)
        self._knobs = config.knobs
        self._knobs_rejected: str | None = None
        telemetry = RouterTelemetry(config.game)
        me = serve.get_replica_context().replica_id.deployment_id
        self._backend = HandleBackend(
            dict(config.applications), config.ingress_deployment, own=(me.app_name, me.name)
        )
        backend = self._backend
        self._load = LoadMeter(config.max_in_flight)
        self._idle = IdleCpu()
        version_load = VersionLoad(backend.replicas, lambda: backend.routers)
        backend.on_read = version_load.refresh
        router = self._router = OfferRouter(
            VersionSplit(config.game, self._versions, config.knobs.weights),
            self._backend,
            budget_ms=config.knobs.request_budget_ms,
            failover_reserve_ms=config.knobs.failover_reserve_ms,
            retry_after_s=config.retry_after_s,
            on_routed=telemetry.routed,
            load=version_load,
            meter=self._load,
            queue_timeout_ms=config.queue_timeout_ms,
        )
        backend.on_up = router.version_up
        self._api_key_sha256 = get_settings().api_key_sha256
        self._status_task = asyncio.get_event_loop().create_task(self._backend.follow_status())

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metrics (app.serving.autoscaling)."""
        return replica_stats(self._load, self._idle)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Live weights and budget (user_config, merged over the args; {} goes back to them).
        On the event loop; never raises (see Supervisor.reconfigure): a bad change is logged,
        refused and shown in GET /v1/split, and the split in force stays."""
        try:
            knobs = self._config.knobs.merged(user_config)
            # The args' versions, then those only this user_config names (a release's);
            # a version it no longer names leaves the split again.
            listed = list(self._config.applications)
            added = [v for v in knobs.weights if v not in listed]
            bad = [v for v in added if not re.fullmatch(VERSION_PATTERN, v)]
            if bad:
                raise ValueError(f"weights name {bad}, which are not version names")
            versions = [*listed, *added]
            split = VersionSplit(self._config.game, versions, knobs.checked(versions).weights)
            for version in added:
                if version not in self._backend.applications:
                    self._backend.add(version, f"{self._config.game}-{version}")
                    logger.info("version %s added live", version)
            self._versions = versions
            self._router.configure(
                split,
                budget_ms=knobs.request_budget_ms,
                failover_reserve_ms=knobs.failover_reserve_ms,
            )
        except ValueError as exc:
            self._knobs_rejected = f"{user_config!r}: {explain(exc)}"
            logger.error(
                "refused router knobs, keeping %s: %s",
                self._knobs.model_dump(),
                self._knobs_rejected,
            )
            return
        self._knobs = knobs
        self._knobs_rejected = None
        logger.info("router knobs applied: %s", knobs.model_dump())

    def _split_info(self) -> SplitInfo:
        split = self._router.split
        shares = split.shares()
        return SplitInfo(
            game=split.game,
            versions=[
                VersionShare(
                    version=v,
                    application=self._backend.applications[v],
                    weight=split.weights[v],
                    share=round(shares[v], 6),
                )
                for v in split.versions
            ],
            request_budget_ms=self._knobs.request_budget_ms,
            failover_reserve_ms=self._knobs.failover_reserve_ms,
            knobs_rejected=self._knobs_rejected,
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_router_api(
            self._router, split_info=self._split_info, api_key_sha256=self._api_key_sha256
        )

    def __del__(self) -> None:
        task = getattr(self, "_status_task", None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(Exception):
                self._router.close()
