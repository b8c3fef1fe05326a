"""The router's view of its versions: Serve's details read as supervisor replicas that can
answer, and a version with none skipped without a call."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from ray.serve._private.common import DeploymentStatus, ReplicaState
from ray.serve.exceptions import BackPressureError
from ray.serve.schema import ApplicationStatus

from app.core.routing.offer_routing import VersionHealth, VersionUnavailable
from app.serving.router import (
    STATUS_POLL_S,
    STATUS_POLL_UNAVAILABLE_S,
    HandleBackend,
    running_replicas,
    version_health,
)

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

INGRESS = "supervisor"


def deployment(status: DeploymentStatus, **replicas: int) -> dict:
    """One deployment of Serve's details as the controller sends it (the fields read): its
    states are Serve's enums, not their values."""
    states = [ReplicaState(state) for state, n in replicas.items() for _ in range(n)]
    return {
        "status": status,
        "replicas": [{"replica_id": f"r{i}", "state": s} for i, s in enumerate(states)],
    }


def application(status: ApplicationStatus, **deployments) -> dict:
    return {"status": status, "message": "", "deployments": deployments}


def details(applications: dict) -> dict:
    return {"applications": applications}


def test_serve_details_are_read_as_running_supervisor_replicas():
    status = details(
        {
            # One of three supervisors killed, the third not placeable: UNHEALTHY, 1 running.
            "g-2026-11": application(
                ApplicationStatus.UNHEALTHY,
                supervisor=deployment(DeploymentStatus.UNHEALTHY, RUNNING=1, STARTING=1),
            ),
            "g-2026-10": application(
                ApplicationStatus.RUNNING,
                supervisor=deployment(DeploymentStatus.HEALTHY, RUNNING=2),
                **{"member-group-0": deployment(DeploymentStatus.HEALTHY, RUNNING=5)},
            ),
            "g-router": application(
                ApplicationStatus.RUNNING, router=deployment(DeploymentStatus.HEALTHY, RUNNING=1)
            ),
        }
    )
    assert version_health(status, INGRESS) == {
        "g-2026-11": VersionHealth("UNHEALTHY", 1),
        "g-2026-10": VersionHealth("RUNNING", 2),
        "g-router": VersionHealth("RUNNING", 0),
    }


class Handle:
    """A supervisor handle; `sees`: the replicas its router would send to (Serve's private
    shape, which tests/integration/serving/test_reliability.py checks live), None: not told
    of any running one yet."""

    def __init__(self, raises: Exception | None = None, sees: int | None = None) -> None:
        self.calls = 0
        self.route_offer = self
        self.raises = raises
        self.waits = []
        self.sent_at = []
        self._router = None
        if sees is not None:
            replicas = {f"replica-{i}": object() for i in range(sees)}
            request_router = SimpleNamespace(curr_replicas=replicas)
            self._router = SimpleNamespace(
                _asyncio_router=SimpleNamespace(_request_router=request_router)
            )

    def running_replicas_populated(self) -> bool:
        return self._router is not None

    async def remote(self, payload, request_id, wait_ms, sent_at_unix_s):
        self.calls += 1
        self.waits.append(wait_ms)
        self.sent_at.append(sent_at_unix_s)
        if self.raises is not None:
            raise self.raises
        return {"status": 200, "body": {"ok": True}}


def backend(health: dict[str, VersionHealth]) -> tuple[HandleBackend, Handle]:
    b = HandleBackend({"2026-11": "g-2026-11"}, INGRESS)
    handle = Handle()
    b._handles["2026-11"] = handle  # type: ignore[assignment]
    b.health = health
    return b, handle


@pytest.mark.parametrize(
    "health",
    [{}, {"g-2026-11": VersionHealth("UNHEALTHY", 1)}, {"g-2026-11": VersionHealth("RUNNING", 2)}],
    ids=["status-not-read-yet", "unhealthy-with-a-live-replica", "running"],
)
def test_a_version_with_a_live_supervisor_is_called(health):
    b, handle = backend(health)
    before = time.time()
    reply = asyncio.run(b.offer("2026-11", {}, None, 120.0))
    assert reply["status"] == 200 and handle.calls == 1
    assert handle.waits == [120.0]  # how long a full supervisor may hold it reaches it
    # Stamped as it is sent: the version's budget runs from there (app.api.routed_login).
    assert before <= handle.sent_at[0] <= time.time()


@pytest.mark.parametrize(
    ("health", "said"),
    [
        ({"g-2026-11": VersionHealth("UNHEALTHY", 0)}, "UNHEALTHY with no running replica"),
        ({"g-2026-10": VersionHealth("RUNNING", 2)}, "not deployed"),
    ],
)
def test_a_version_with_no_supervisor_is_skipped_without_a_call(health, said):
    b, handle = backend(health)
    with pytest.raises(VersionUnavailable, match=said):
        asyncio.run(b.offer("2026-11", {}, None))
    assert handle.calls == 0


@pytest.mark.parametrize("sees", [None, 1, 2], ids=["not-told-yet", "one", "two"])
def test_a_version_whose_handle_sees_a_supervisor_is_called(sees):
    b, _ = backend({"g-2026-11": VersionHealth("RUNNING", 2)})
    handle = b._handles["2026-11"] = Handle(sees=sees)  # type: ignore[assignment]
    assert asyncio.run(b.offer("2026-11", {}, None))["status"] == 200
    assert handle.calls == 1


def test_a_version_whose_handle_saw_every_supervisor_die_is_skipped_before_the_status_says():
    """Serve's status still says two running (the controller has not noticed yet), but the
    handle's own calls met both dead: a call now would be held until a replacement runs."""
    b, _ = backend({"g-2026-11": VersionHealth("RUNNING", 2)})
    handle = b._handles["2026-11"] = Handle(sees=0)  # type: ignore[assignment]
    with pytest.raises(VersionUnavailable, match="every supervisor this router knew died"):
        asyncio.run(b.offer("2026-11", {}, None))
    assert handle.calls == 0


def test_a_full_handle_queue_is_an_overload_refusal_not_a_failure():
    """Serve's BackPressureError (the version's replicas and queues are full) comes back as
    a 503, which the router neither spills onto another version nor counts against it."""
    b, _ = backend({"g-2026-11": VersionHealth("RUNNING", 2)})
    b._handles["2026-11"] = Handle(
        BackPressureError(num_queued_requests=64, max_queued_requests=64)
    )  # type: ignore[assignment]
    reply = asyncio.run(b.offer("2026-11", {}, None))
    assert reply["status"] == 503 and "overloaded" in reply["detail"]


def test_the_routers_view_of_replicas_for_its_share_of_each_version():
    status = details(
        {
            "g-2026-11": application(
                ApplicationStatus.RUNNING,
                supervisor=deployment(DeploymentStatus.HEALTHY, RUNNING=2, STOPPING=1),
            ),
            "g-router": application(
                ApplicationStatus.RUNNING,
                router=deployment(DeploymentStatus.UPSCALING, RUNNING=2, STARTING=1),
            ),
        }
    )
    assert running_replicas(status, "g-router", "router") == 2
    assert running_replicas(status, "g-router", "supervisor") == 0
    assert running_replicas(status, "g-gone", "router") == 0
    b, _ = backend({})
    assert b.replicas("2026-11") is None  # not read yet: the router caps nothing
    b.health = version_health(status, INGRESS)
    assert b.replicas("2026-11") == 2


def serve_status(supervisors_running: int) -> dict:
    app_status = ApplicationStatus.RUNNING if supervisors_running else ApplicationStatus.DEPLOYING
    replicas = {"RUNNING": supervisors_running} if supervisors_running else {"STARTING": 2}
    return details(
        {
            "g-2026-11": application(
                app_status, supervisor=deployment(DeploymentStatus.UPDATING, **replicas)
            )
        }
    )


async def follow_status_for(b: HandleBackend, reads: int, between=None) -> list[float]:
    """Runs the backend's status loop for `reads` reads on a fake sleep and returns the
    sleeps it asked for; `between(n)` is awaited at the n-th sleep (1-based), before it."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if between is not None:
            await between(len(sleeps))
        if len(sleeps) == reads:
            raise asyncio.CancelledError

    b._sleep = sleep
    with pytest.raises(asyncio.CancelledError):
        await b.follow_status()
    return sleeps


def test_a_version_read_while_it_deployed_is_tried_again_at_the_next_short_read():
    """A status read while the version was still deploying (no supervisor running) must not
    keep its logins refused for a whole long poll once Serve has it running: the router reads
    again after the short interval, and then calls it."""
    reads = iter([serve_status(0), serve_status(2), serve_status(2)])
    b = HandleBackend({"2026-11": "g-2026-11"}, INGRESS, read_status=lambda: next(reads))
    handle = Handle()
    b._handles["2026-11"] = handle  # type: ignore[assignment]

    async def between(n: int) -> None:
        if n == 1:
            # Between the first read and the next: the version is skipped.
            with pytest.raises(VersionUnavailable, match="no running replica"):
                await b.offer("2026-11", {}, None)

    async def run() -> list[float]:
        sleeps = await follow_status_for(b, 3, between)
        assert (await b.offer("2026-11", {}, None))["status"] == 200
        return sleeps

    sleeps = asyncio.run(run())
    assert sleeps == [STATUS_POLL_UNAVAILABLE_S, STATUS_POLL_S, STATUS_POLL_S]
    assert STATUS_POLL_UNAVAILABLE_S < STATUS_POLL_S
    assert handle.calls == 1


@pytest.mark.parametrize(
    ("health", "poll"),
    [
        ({}, "short"),
        (
            {"g-2026-11": VersionHealth("RUNNING", 2), "g-2026-10": VersionHealth("RUNNING", 1)},
            "long",
        ),
        (
            {"g-2026-11": VersionHealth("UNHEALTHY", 1), "g-2026-10": VersionHealth("RUNNING", 1)},
            "long",
        ),
        (
            {"g-2026-11": VersionHealth("UNHEALTHY", 0), "g-2026-10": VersionHealth("RUNNING", 1)},
            "short",
        ),
        ({"g-2026-10": VersionHealth("RUNNING", 1)}, "long"),
    ],
    ids=["never-read", "all-running", "one-live-replica", "one-version-down", "one-not-deployed"],
)
def test_status_is_read_often_only_while_a_version_cannot_be_tried(health, poll):
    b = HandleBackend({"2026-11": "g-2026-11", "2026-10": "g-2026-10"}, INGRESS)
    b.health = health
    expected = STATUS_POLL_UNAVAILABLE_S if poll == "short" else STATUS_POLL_S
    assert b.poll_interval_s() == expected


def test_each_status_read_tells_the_router_after_the_view_is_updated():
    """The router's VersionLoad is refreshed after every read, with the new view in place."""
    reads = iter([serve_status(0), serve_status(2)])
    seen: list[int | None] = []
    b = HandleBackend({"2026-11": "g-2026-11"}, INGRESS, read_status=lambda: next(reads))
    b.on_read = lambda: seen.append(b.replicas("2026-11"))
    asyncio.run(follow_status_for(b, 2))
    assert seen == [0, 2]


def test_a_status_read_that_fails_is_retried_at_the_long_interval():
    """Serve's controller not answering must not be asked 4 times a second, nor logged so."""

    def unreachable():
        raise ConnectionError("controller gone")

    b = HandleBackend({"2026-11": "g-2026-11"}, INGRESS, read_status=unreachable)
    assert asyncio.run(follow_status_for(b, 2)) == [STATUS_POLL_S, STATUS_POLL_S]


def test_a_version_the_status_shows_down_then_up_is_told_to_the_router_once():
    """The read after the one that showed it deploying (or with every supervisor dead) says
    it came up; reads that show it up all along, and the first read of all, say nothing."""
    reads = iter([serve_status(2), serve_status(0), serve_status(2), serve_status(2)])
    came_up: list[tuple[int, str]] = []
    b = HandleBackend({"2026-11": "g-2026-11"}, INGRESS, read_status=lambda: next(reads))
    b.on_up = lambda version: came_up.append((b.replicas(version), version))
    asyncio.run(follow_status_for(b, 4))
    assert came_up == [(2, "2026-11")]  # told after the view that shows it up is in place
