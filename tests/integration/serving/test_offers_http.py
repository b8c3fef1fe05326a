"""The request path end to end over HTTP: features from dynalite, members in Ray Serve."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from app.adapters.dynamodb import PARTITION_KEY, player_key
from app.adapters.member_model import MemberModel
from app.contract.manifest import load_manifest
from app.core.offers import OfferCatalog
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE, TEST_VERSION

pytestmark = pytest.mark.integration


def post_offer(base: str, body, **kwargs) -> requests.Response:
    return requests.post(f"{base}/v1/offers", json=body, timeout=10, **kwargs)


def test_seeded_player_gets_personalized_offer(serve_app, tiny_version_dir):
    manifest = load_manifest(tiny_version_dir)
    response = post_offer(serve_app, {"player_id": player_id(7), "game": TEST_GAME})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["personalized"] is True
    assert body["fallback_reason"] is None
    assert body["game"] == TEST_GAME
    assert body["ensemble_version"] == TEST_VERSION
    assert body["members_answered"] == body["members_total"] == len(manifest.members)
    assert sorted(body["answered_members"]) == sorted(m.name for m in manifest.members)
    assert body["offer"]["offer_id"] in {o.offer_id for o in manifest.offers}
    assert 0.0 < body["propensity"] < 1.0
    assert body["expected_revenue"] == pytest.approx(
        body["propensity"] * body["offer"]["price"] * (1 - body["offer"]["discount"]), rel=1e-9
    )
    assert body["timings"]["total_ms"] > 0


def test_unknown_player_gets_flagged_fallback(serve_app, tiny_version_dir):
    manifest = load_manifest(tiny_version_dir)
    response = post_offer(serve_app, {"player_id": player_id(TEST_PLAYERS + 5), "game": TEST_GAME})
    assert response.status_code == 200
    body = response.json()
    assert body["personalized"] is False
    assert body["fallback_reason"] == "unknown_player"
    assert body["offer"]["offer_id"] == manifest.fallback_offer_id
    assert body["members_answered"] == 0


@pytest.mark.parametrize(
    "body",
    [{"player_id": "p1"}, {"player_id": "bad id!", "game": TEST_GAME}, {"player_id": 3, "game": 4}],
)
def test_malformed_body_gets_422(serve_app, body):
    response = post_offer(serve_app, body)
    assert response.status_code == 422
    assert response.json()["detail"]


def test_other_game_gets_404(serve_app):
    response = post_offer(serve_app, {"player_id": player_id(1), "game": "puzzle-harbor"})
    assert response.status_code == 404


def test_request_id_header_is_echoed(serve_app):
    response = post_offer(
        serve_app, {"player_id": player_id(3), "game": TEST_GAME}, headers={"X-Request-ID": "gs-42"}
    )
    assert response.json()["request_id"] == "gs-42"


def test_ensemble_endpoint_describes_the_manifest(serve_app, tiny_version_dir):
    manifest = load_manifest(tiny_version_dir)
    info = requests.get(f"{serve_app}/v1/ensemble", timeout=10).json()
    assert info["version"] == TEST_VERSION
    assert [m["name"] for m in info["members"]] == [m.name for m in manifest.members]
    assert info["ensemble_auc"] == pytest.approx(manifest.ensemble_auc)


def test_openapi_is_served_with_the_offer_route(serve_app):
    schema = requests.get(f"{serve_app}/openapi.json", timeout=10).json()
    assert "/v1/offers" in schema["paths"]
    assert "OfferResponse" in schema["components"]["schemas"]


def test_each_member_is_its_own_deployment(serve_app, tiny_version_dir):
    from ray import serve

    manifest = load_manifest(tiny_version_dir)
    deployments = serve.status().applications[f"{TEST_GAME}-{TEST_VERSION}"].deployments
    assert set(deployments) == {"supervisor"} | {f"member-{m.name}" for m in manifest.members}


def test_the_routers_status_read_sees_the_running_replicas(serve_app, tiny_version_dir):
    """The router's read of Serve's details (not serve.status(), which cost 23-107 times
    the CPU) against a live cluster: the shape its unit tests fake is the one Serve sends."""
    from app.core.routing.offer_routing import VersionHealth
    from app.serving.router import read_serve_details, running_replicas, version_health

    app_name = f"{TEST_GAME}-{TEST_VERSION}"
    details = read_serve_details()
    assert version_health(details, "supervisor")[app_name] == VersionHealth("RUNNING", 1)
    for member in load_manifest(tiny_version_dir).members:
        assert running_replicas(details, app_name, f"member-{member.name}") == 1
    assert running_replicas(details, app_name, "member-not-there") == 0


def test_propensities_match_offline_computation(serve_app, tiny_version_dir, dynalite_server):
    """Serving and an offline recomputation from the same artifacts and stored features agree."""
    manifest = load_manifest(tiny_version_dir)
    models = [MemberModel.load(entry, tiny_version_dir) for entry in manifest.members]
    catalog = OfferCatalog(manifest)
    client = dynalite_server.client()
    weights = np.array([m.weight for m in manifest.members])
    for index in range(0, 60, 3):
        pid = player_id(index)
        item = client.get_item(
            TableName=TEST_TABLE, Key={PARTITION_KEY: {"S": player_key(TEST_GAME, pid)}}
        )["Item"]
        candidates = catalog.candidates(manifest.feature_schema.decode_item(item))
        scores = np.stack([model.score(candidates) for model in models])
        offline = catalog.decide(weights @ scores / weights.sum())

        served = post_offer(serve_app, {"player_id": pid, "game": TEST_GAME}).json()
        assert served["personalized"] is True
        assert served["offer"]["offer_id"] == offline.offer.offer_id, pid
        assert abs(served["propensity"] - offline.propensity) <= 1e-6, pid
        assert abs(served["expected_revenue"] - offline.expected_revenue) <= 1e-6, pid


def test_unknown_version_gets_404(serve_app):
    other_version = serve_app.replace(f"/{TEST_VERSION}", "/1999-01")
    response = post_offer(other_version, {"player_id": player_id(1), "game": TEST_GAME})
    assert response.status_code == 404


def test_oversized_body_gets_413_through_the_proxy(serve_app):
    body = {"player_id": "p1", "game": TEST_GAME, "pad": "x" * 40_000}
    response = requests.post(
        f"{serve_app}/v1/offers",
        data=json.dumps(body),
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
