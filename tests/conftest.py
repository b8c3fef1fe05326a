"""Fixtures shared by the tiers that need real infrastructure: trained models and dynalite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
