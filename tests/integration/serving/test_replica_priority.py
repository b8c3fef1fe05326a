"""Deployed replicas give way on the CPU to Serve's own processes, and have their node's raylet
start workers at Ray's worker niceness (app.adapters.cpu_priority)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.config.settings import Settings
from tests.integration.conftest import APP_NAME

pytestmark = pytest.mark.integration

PROC = Path("/proc")
CONTROLLER = "SERVE_CONTROLLER_ACTOR"  # Serve's name for its controller actor


def actor_pid(name: str, parent: bool = False) -> int:
    """The pid of one named actor of this test's Ray instance (not of any other on the host),
    or of its parent process."""
    import ray

    actor = ray.get_actor(name, namespace="serve")
    which = os.getppid if parent else os.getpid
    return ray.get(actor.__ray_call__.remote(lambda _self: which()), timeout=60)


def thread_niceness(pid: int) -> list[int]:
    """Each live thread's niceness: field 19 of /proc/<pid>/task/<tid>/stat."""
    values = []
    for task in (PROC / str(pid) / "task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        # After the command name in parentheses, which may itself hold spaces.
        values.append(int(stat.rsplit(")", 1)[1].split()[16]))
    return values


@pytest.mark.skipif(not PROC.joinpath("self", "task").is_dir(), reason="Linux /proc")
def test_every_replica_thread_runs_nicer_than_serves_controller(serve_app):
    import ray

    niceness = Settings().replica_niceness
    replicas = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#")
    ]
    # The tiny application: a supervisor and one deployment per member, each one replica.
    assert len(replicas) >= 2, replicas
    for name in replicas:
        assert set(thread_niceness(actor_pid(name))) == {niceness}, name
    # Only the replicas moved: Serve's controller keeps threads below them.
    assert min(thread_niceness(actor_pid(CONTROLLER))) < niceness


@pytest.mark.skipif(not PROC.joinpath("self", "task").is_dir(), reason="Linux /proc")
def test_the_raylet_that_starts_the_replicas_runs_at_rays_worker_niceness(serve_app):
    """Every worker the raylet starts runs Ray's setup_worker.py at the raylet's niceness
    before its own code: a replacement replica's first CPU-second must not outrank the
    replicas serving beside it 68 to 1 (app.adapters.cpu_priority.raylet_gives_way)."""
    import ray

    supervisor = next(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#")
    )
    raylet = actor_pid(supervisor, parent=True)
    assert (PROC / str(raylet) / "comm").read_text().strip() == "raylet"
    assert set(thread_niceness(raylet)) == {Settings().raylet_niceness}


def test_replicas_start_without_pandas_and_serves_controller_with_it(serve_app):
    """A replica's worker starts through app.serving.worker_entry, which keeps pandas out of
    it (Serve imports it only for a JSON encoder no offer uses); Serve's own processes start
    as Ray starts them, pandas loaded."""
    import ray

    def pandas_loaded(_self: object) -> bool:
        import sys

        return sys.modules.get("pandas") is not None

    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#")
    ]
    assert len(names) >= 2, names
    for name in [*names, CONTROLLER]:
        actor = ray.get_actor(name, namespace="serve")
        loaded = ray.get(actor.__ray_call__.remote(pandas_loaded), timeout=60)
        assert loaded is (name == CONTROLLER), name
