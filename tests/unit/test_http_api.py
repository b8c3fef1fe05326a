"""The FastAPI surface without Ray: status codes, validation messages, OpenAPI."""

import hashlib

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.fanout import Fanout
from app.http_api import build_http_api
from app.offer_service import OfferService
from tests.support import FakeFeatureStore, FakeMember, small_manifest

pytestmark = pytest.mark.unit


def api(**kwargs):
    manifest = small_manifest(weights=(1.0,))
    store = FakeFeatureStore(manifest.feature_schema, {"p1": {"level": 5}})
    member = FakeMember("m0", 1.0, lambda m: np.full(m.shape[0], 0.1))
    service = OfferService(manifest, store, Fanout([member]), request_budget_ms=500)
    return build_http_api(service, **kwargs)


@pytest.fixture
def client():
    with TestClient(api()) as test_client:
        yield test_client


def test_offer_round_trip(client):
    response = client.post(
        "/v1/offers", json={"player_id": "p1", "game": "test-game"}, headers={"X-Request-ID": "t-1"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["request_id"] == "t-1"
    assert body["personalized"] is True
    assert body["ensemble_version"] == "v-test"
    assert set(body["timings"]) == {"features_ms", "fanout_ms", "total_ms"}


@pytest.mark.parametrize(
    "body",
    [
        {"game": "test-game"},
        {"player_id": "p1"},
        {"player_id": "", "game": "test-game"},
        {"player_id": "p1; DROP TABLE", "game": "test-game"},
        {"player_id": "p" * 65, "game": "test-game"},
        {"player_id": 42, "game": "test-game"},
        {"player_id": "p1", "game": "test-game", "unexpected": 1},
        {"player_id": "p1", "game": "test-game", "context": {"platform": "symbian"}},
        [],
    ],
)
def test_malformed_bodies_get_422(client, body):
    response = client.post("/v1/offers", json=body)
    assert response.status_code == 422
    assert response.json()["detail"]


def test_non_json_body_gets_422(client):
    response = client.post(
        "/v1/offers", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422


def test_other_game_gets_404_with_reason(client):
    response = client.post("/v1/offers", json={"player_id": "p1", "game": "other-game"})
    assert response.status_code == 404
    assert "not served here" in response.json()["detail"]


def test_health_and_ensemble(client):
    assert client.get("/healthz").json() == {
        "status": "ok",
        "game": "test-game",
        "version": "v-test",
    }
    assert client.get("/v1/ensemble").json()["members"][0]["name"] == "m0"


def test_openapi_documents_the_offer_endpoint(client):
    schema = client.get("/openapi.json").json()
    post = schema["paths"]["/v1/offers"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "OfferRequest"
    )
    assert {"200", "404", "422"} <= set(post["responses"])
    response_schema = schema["components"]["schemas"]["OfferResponse"]
    assert {"offer", "propensity", "personalized", "fallback_reason", "timings"} <= set(
        response_schema["properties"]
    )


def test_oversized_body_gets_413(client):
    body = b'{"player_id": "p1", "game": "test-game", "pad": "' + b"x" * 20_000 + b'"}'
    response = client.post("/v1/offers", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413


def test_wrong_types_get_a_readable_422(client):
    response = client.post("/v1/offers", json={"player_id": 42, "game": "test-game"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "player_id"]
    assert "string" in error["msg"].lower()


def test_deadline_ms_out_of_range_gets_422(client):
    for deadline in (0, 10_001, "soon"):
        response = client.post(
            "/v1/offers", json={"player_id": "p1", "game": "test-game", "deadline_ms": deadline}
        )
        assert response.status_code == 422, deadline


KEY = "s3cret-game-server-key"
KEY_SHA256 = hashlib.sha256(KEY.encode()).hexdigest()


@pytest.fixture
def authed():
    with TestClient(api(api_key_sha256=SecretStr(KEY_SHA256))) as test_client:
        yield test_client


@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "wrong"}, {"X-API-Key": KEY_SHA256}])
def test_offers_without_the_right_key_get_401(authed, headers):
    body = {"player_id": "p1", "game": "test-game"}
    response = authed.post("/v1/offers", json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "ApiKey"
    assert authed.get("/v1/ensemble", headers=headers).status_code == 401


def test_offers_with_the_key_pass_and_health_stays_open(authed):
    response = authed.post(
        "/v1/offers", json={"player_id": "p1", "game": "test-game"}, headers={"X-API-Key": KEY}
    )
    assert response.status_code == 200
    assert authed.get("/v1/ensemble", headers={"X-API-Key": KEY}).status_code == 200
    assert authed.get("/healthz").status_code == 200


def test_settings_accept_only_a_hex_digest_as_the_key():
    from app.settings import Settings

    assert Settings(api_key_sha256=KEY_SHA256).api_key_sha256.get_secret_value() == KEY_SHA256
    with pytest.raises(ValueError):
        Settings(api_key_sha256=KEY)  # the key itself, not its digest
