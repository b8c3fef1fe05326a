"""The benchmark's peers answer exactly like the ensemble for the same players.

A benchmark compares like with like only if every system computes the same answer: the same
offer, propensity and expected revenue, the same fallbacks and the same validation errors.
Each peer is held to the ensemble scoring with its runtime: legacy and the pool call the
native predicts (as users run them), `pool-compiled` the compiled members, as the shipped
ensemble does; a second application of the same ensemble with `runtime: native` answers for
the native ones (the session's `native_app`, tests/integration/conftest.py). (Across
runtimes the offers are the same and the propensities within the fidelity tolerance:
tests/integration/serving/test_member_placement.py.)
"""

from __future__ import annotations

import pytest
import requests

from app.local.processes import free_port
from loadtest.bench.peers import LegacySystem, PoolCompiledSystem, PoolSystem
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE, TEST_VERSION

pytestmark = pytest.mark.integration

PREFIX = f"/{TEST_GAME}/{TEST_VERSION}"


@pytest.fixture
def ensemble(request, serve_app, peer_base):
    """The ensemble scoring with the peer's runtime."""
    native = request.node.callspec.params["peer_base"] is not PoolCompiledSystem
    return request.getfixturevalue("native_app") if native else serve_app


@pytest.fixture(
    scope="module",
    params=[LegacySystem, PoolSystem, PoolCompiledSystem],
    ids=["legacy", "pool", "pool-compiled"],
)
def peer_base(request, tiny_version_dir, dynalite_server, tmp_path_factory):
    peer = request.param
    log = tmp_path_factory.mktemp(peer.name) / f"{peer.name}.log"
    system = peer(
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
def test_same_offer_and_propensity_as_the_ensemble(ensemble, peer_base, index):
    served, peer = offer(ensemble, player_id(index)), offer(peer_base, player_id(index))
    assert peer["personalized"] is served["personalized"] is True
    assert peer["offer"] == served["offer"]
    assert peer["propensity"] == pytest.approx(served["propensity"], abs=1e-9)
    assert peer["expected_revenue"] == pytest.approx(served["expected_revenue"], abs=1e-9)
    assert peer["answered_members"] == served["answered_members"]


def test_same_fallback_for_unknown_players(ensemble, peer_base):
    pid = player_id(TEST_PLAYERS + 1)
    served, peer = offer(ensemble, pid), offer(peer_base, pid)
    assert peer["fallback_reason"] == served["fallback_reason"] == "unknown_player"
    assert peer["offer"] == served["offer"]


def test_same_validation_errors(peer_base):
    response = requests.post(f"{peer_base}/v1/offers", json={"player_id": "x y"}, timeout=10)
    assert response.status_code == 422
