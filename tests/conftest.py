"""Fixtures shared by the tiers that need real infrastructure: trained models and dynalite."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.local_dynamo import Dynalite, free_port
from app.seeding import ensure_table, seed_game

TEST_GAME = "galaxy-raiders"
TEST_VERSION = "2026-11"
TEST_PLAYERS = 300
TEST_TABLE = "player-features-test"
POPULATION_SEED = 20261


@pytest.fixture(scope="session")
def tiny_version_dir() -> Path:
    """The tiny-profile ensemble (4 members), trained once and cached under models/artifacts."""
    from models.train import ensure_trained

    return ensure_trained(TEST_GAME, TEST_VERSION, "tiny")


@pytest.fixture(scope="session")
def dynalite_server(tmp_path_factory):
    """An in-memory dynalite on a free loopback port, seeded with TEST_PLAYERS players."""
    log = tmp_path_factory.mktemp("dynalite") / "dynalite.log"
    with Dynalite(free_port(), data_dir=None, log_path=log) as server:
        client = server.client(timeout_s=10.0)
        ensure_table(client, TEST_TABLE)
        seed_game(client, TEST_TABLE, TEST_GAME, TEST_PLAYERS, seed=POPULATION_SEED)
        yield server
