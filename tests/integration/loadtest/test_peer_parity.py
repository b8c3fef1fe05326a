"""The legacy baseline answers exactly like the ensemble service for the same players."""

from __future__ import annotations

import pytest
import requests

from app.local.dynalite import free_port
from loadtest.systems import LegacySystem
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE, TEST_VERSION

pytestmark = pytest.mark.integration

PREFIX = f"/{TEST_GAME}/{TEST_VERSION}"


@pytest.fixture(scope="module")
def legacy_base(tiny_version_dir, dynalite_server, tmp_path_factory):
    log = tmp_path_factory.mktemp("legacy") / "legacy.log"
    system = LegacySystem(
        tiny_version_dir,
        PREFIX,
        free_port(),
        dynalite_server.endpoint_url,
        TEST_TABLE,
        log,
        workers=2,
    )
    with system:
        yield f"{system.base_url}{PREFIX}"
    assert system.process is None  # stopped by the context manager


def offer(base: str, pid: str) -> dict:
    response = requests.post(
        f"{base}/v1/offers", json={"player_id": pid, "game": TEST_GAME}, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("index", [0, 1, 7, 42, 99, 150, 299])
def test_same_offer_and_propensity_as_the_ensemble(serve_app, legacy_base, index):
    served, legacy = offer(serve_app, player_id(index)), offer(legacy_base, player_id(index))
    assert legacy["personalized"] is served["personalized"] is True
    assert legacy["offer"] == served["offer"]
    assert legacy["propensity"] == pytest.approx(served["propensity"], abs=1e-9)
    assert legacy["expected_revenue"] == pytest.approx(served["expected_revenue"], abs=1e-9)
    assert legacy["answered_members"] == served["answered_members"]


def test_same_fallback_for_unknown_players(serve_app, legacy_base):
    pid = player_id(TEST_PLAYERS + 1)
    served, legacy = offer(serve_app, pid), offer(legacy_base, pid)
    assert legacy["fallback_reason"] == served["fallback_reason"] == "unknown_player"
    assert legacy["offer"] == served["offer"]


def test_same_validation_errors(legacy_base):
    response = requests.post(f"{legacy_base}/v1/offers", json={"player_id": "x y"}, timeout=10)
    assert response.status_code == 422
