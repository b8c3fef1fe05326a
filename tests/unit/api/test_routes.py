"""The FastAPI surface without Ray: status codes, validation messages, OpenAPI."""

import hashlib

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.api.routes import build_http_api
from app.core.admission import AdmissionGate
from app.core.online.fanout import Fanout
from app.core.online.offer_service import OfferService
from tests.support import FakeFeatureStore, FakeMember, small_manifest

pytestmark = pytest.mark.unit


MEMBER = FakeMember("m0", 1.0, lambda m: np.full(m.shape[0], 0.1))


def api(**kwargs):
    manifest = small_manifest(weights=(1.0,))
    store = FakeFeatureStore(manifest.feature_schema, {"p1": {"level": 5, "platform": "ios"}})
    service = OfferService(manifest, store, Fanout([MEMBER]), request_budget_ms=500, quorum=0.5)
    kwargs.setdefault("admission", AdmissionGate(100))
    kwargs.setdefault("retry_after_s", 1.0)
    return build_http_api(service, **kwargs)


@pytest.fixture
def client():
    MEMBER.calls.clear()
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
    info = client.get("/v1/ensemble").json()
    assert [m["name"] for m in info["members"]] == ["m0"]
    assert [o["offer_id"] for o in info["offers"]] == ["cheap", "mid", "big"]
    assert info["features"] == ["level", "spend_28d", "platform", "price", "discount"]


def test_context_platform_overrides_the_stored_one(client):
    body = {"player_id": "p1", "game": "test-game", "context": {"platform": "android"}}
    assert client.post("/v1/offers", json=body).status_code == 200
    body["context"]["platform"] = "ios"
    assert client.post("/v1/offers", json=body).status_code == 200
    platform = 2  # column of `platform` in the candidate rows; android is category 0
    assert [float(call[0, platform]) for call in MEMBER.calls] == [0.0, 1.0]


def test_body_that_is_not_utf8_gets_400(client):
    response = client.post(
        "/v1/offers",
        content=b'{"player_id": "\xff\xfe"}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["detail"]


@pytest.mark.parametrize(
    ("request_id", "status"),
    [
        ("gs-42.retry_1", 200),
        ("a" * 64, 200),
        ("a" * 65, 422),
        ("", 422),
        ("has space", 422),
        ("semi;colon", 422),
    ],
)
def test_request_id_header_is_echoed_only_if_it_is_a_bounded_id(client, request_id, status):
    response = client.post(
        "/v1/offers",
        json={"player_id": "p1", "game": "test-game"},
        headers={"X-Request-ID": request_id},
    )
    assert response.status_code == status, response.text
    if status == 200:
        assert response.json()["request_id"] == request_id
    else:
        assert response.json()["detail"][0]["loc"] == ["header", "x-request-id"]


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
    from app.config.settings import Settings

    assert Settings(api_key_sha256=KEY_SHA256).api_key_sha256.get_secret_value() == KEY_SHA256
    with pytest.raises(ValueError):
        Settings(api_key_sha256=KEY)  # the key itself, not its digest


def test_settings_read_the_digest_from_a_mounted_secret_file(tmp_path):
    from app.config.settings import Settings

    mounted = tmp_path / "sha256"
    mounted.write_text(KEY_SHA256 + "\n")  # `kubectl create secret --from-file` keeps newlines
    settings = Settings(api_key_sha256_file=mounted)
    assert settings.api_key_sha256.get_secret_value() == KEY_SHA256
    with pytest.raises(ValueError, match="not both"):
        Settings(api_key_sha256_file=mounted, api_key_sha256=KEY_SHA256)
    with pytest.raises(ValueError, match="No such file"):
        Settings(api_key_sha256_file=tmp_path / "missing")  # never start unauthenticated
    mounted.write_text(KEY)  # the key itself, not its digest
    with pytest.raises(ValueError, match="64 lowercase hex"):
        Settings(api_key_sha256_file=mounted)


def test_a_login_past_the_admission_bound_is_refused_at_once_with_retry_after():
    gate = AdmissionGate(1)
    assert gate.try_enter()  # another login holds the only slot
    with TestClient(api(admission=gate, retry_after_s=2.5)) as client:
        response = client.post("/v1/offers", json={"player_id": "p1", "game": "test-game"})
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "3"  # whole seconds, rounded up
        assert "overloaded" in response.json()["detail"]
        # Only logins are gated: health and the ensemble description still answer.
        assert client.get("/healthz").status_code == 200
        gate.leave()
        assert (
            client.post("/v1/offers", json={"player_id": "p1", "game": "test-game"}).status_code
            == 200
        )
    assert (gate.in_flight, gate.refused) == (0, 1)


def test_the_budget_starts_at_the_front_proxy_stamp():
    import time

    with TestClient(api()) as client:
        # The front proxy says the request reached it 0.3 s ago: of the 500 ms budget,
        # about 200 ms are left when the service starts, and total_ms counts from the stamp.
        stamp = f"t={time.time() - 0.3:.6f}"
        body = client.post(
            "/v1/offers",
            json={"player_id": "p1", "game": "test-game"},
            headers={"X-Request-Start": stamp},
        ).json()
        assert body["personalized"] is True
        assert 300.0 <= body["timings"]["total_ms"] < 500.0

        # A request that waited past its whole budget is refused, not answered late.
        late = client.post(
            "/v1/offers",
            json={"player_id": "p1", "game": "test-game"},
            headers={"X-Request-Start": f"t={time.time() - 0.6:.6f}"},
        )
        assert late.status_code == 503
        assert late.headers["Retry-After"] == "1"
        assert "waited" in late.json()["detail"]
