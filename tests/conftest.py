"""Fixtures shared by the tiers that need real infrastructure: trained models and dynalite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId

from app.config.settings import Settings
from app.local.dynalite import Dynalite
from app.local.processes import free_port
from app.local.ray_auth import ray_auth_env
from app.local.seeding import ensure_table, seed_game
from models.train import ensure_trained

TEST_GAME = "galaxy-raiders"
TEST_VERSION = "2026-11"
TEST_PLAYERS = 600  # the batch parity test compares 500 of them
TEST_TABLE = "player-features-test"


def pytest_configure(config: pytest.Config) -> None:
    """Every Ray a test starts (ray.init, `serve run`, `ray start`) uses the project's token.

    Without it, a test's ray.init() would write ~/.ray/auth_token, and a later `ray start`
    would pass only because of it: a test would depend on which ran first.
    """
    os.environ.update(ray_auth_env())


# The fixtures that start or use a Ray cluster (the session's, the e2e package's `ray start`
# and its views). Two clusters at once on 2 cores starve each other: answers came 1.5 s late
# and health checks failed (measured with every test free to run in either worker).
RAY_CLUSTERS = frozenset({"serve_app", "e2e_cluster", "deployed_cluster"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Work units for xdist's `--dist loadgroup` (`make test` runs 2 workers): every test on
    a Ray cluster runs in one worker, in collection order, one cluster at a time; the others
    run file by file in the other worker, so no module fixture starts twice.

    xdist 3.8 tells its scheduler a test's group by appending `@<group>` to the test's id,
    through `item._nodeid`, which pytest 9.2 no longer reads (its ids live in `item._id`):
    its `xdist_group` marker is silently ignored, and each test became a unit of its own
    (two workers then started a Serve cluster each). The suffix is set here instead."""
    loadgroup = getattr(config.option, "loadgroup", False)  # set in xdist's workers only
    for item in items:
        path = item.nodeid.split("::")[0]
        on_a_cluster = path.startswith("tests/e2e/") or not RAY_CLUSTERS.isdisjoint(
            getattr(item, "fixturenames", ())
        )
        if on_a_cluster:
            item.add_marker(pytest.mark.ray_cluster)
        if not loadgroup:
            continue
        group = "ray-clusters" if on_a_cluster else path
        item._id = NodeId.parse(f"{item.nodeid}@{group}")  # noqa: SLF001 (see above)


@pytest.fixture(scope="session")
def tiny_version_dir() -> Path:
    """The tiny-profile ensemble (4 members), trained once and cached in the artifacts root."""
    return ensure_trained(TEST_GAME, TEST_VERSION, "tiny", root=Settings().artifacts_root)


@pytest.fixture(scope="session")
def dynalite_server(tmp_path_factory):
    """An in-memory dynalite on a free loopback port, seeded with TEST_PLAYERS players."""
    log = tmp_path_factory.mktemp("dynalite") / "dynalite.log"
    with Dynalite(free_port(), data_dir=None, log_path=log) as server:
        client = server.client(timeout_s=10.0)
        ensure_table(client, TEST_TABLE)
        seed_game(client, TEST_TABLE, TEST_GAME, TEST_PLAYERS)
        yield server
