"""An application whose args name a model store: its replicas load the published version
through the node cache and answer as the one loaded from the training folder; a version
tampered with in the store is refused before anything is loaded, with both hashes named."""

from __future__ import annotations

import pytest
import requests

from app.adapters.model_store import ModelStore, cached
from app.contract.artifacts import ArtifactIntegrityError
from app.contract.manifest import load_manifest
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_VERSION
from tests.integration.conftest import STORE_BUCKET, app_args, deploy, undeploy
from tests.integration.serve_apps import DeployFailed

pytestmark = pytest.mark.integration

NAME, PREFIX = "from-store", "/from-store"


def store_args(tiny_version_dir, store: ModelStore) -> dict:
    """Planned: every tiny member inline, so one replica (the supervisor) loads the whole
    version from the node cache, instead of five replicas starting."""
    return app_args(tiny_version_dir, artifacts=store.uri, layout="auto")


def published(s3_server, tiny_version_dir, prefix: str) -> ModelStore:
    store = ModelStore(s3_server.client(), f"s3://{STORE_BUCKET}/{prefix}")
    store.publish(tiny_version_dir)
    return store


def test_replicas_load_a_published_version_through_the_node_cache(
    serve_app, s3_server, model_cache_dir, tiny_version_dir
):
    store = published(s3_server, tiny_version_dir, "serving")
    deploy(store_args(tiny_version_dir, store), name=NAME, route_prefix=PREFIX)
    try:
        base = serve_app.replace(f"/{TEST_GAME}/{TEST_VERSION}", PREFIX)
        for i in range(5):
            body = {"player_id": player_id(i), "game": TEST_GAME}
            from_store = requests.post(f"{base}/v1/offers", json=body, timeout=10).json()
            from_folder = requests.post(f"{serve_app}/v1/offers", json=body, timeout=10).json()
            assert from_store["personalized"] is True
            assert from_store["offer"] == from_folder["offer"]
            assert from_store["propensity"] == from_folder["propensity"]
        assert cached(store.cache_folder(TEST_GAME, TEST_VERSION, model_cache_dir))
        info = requests.get(f"{base}/v1/ensemble", timeout=10).json()
        assert "artifacts (node cache), manifest" in info["startup_ms"]
    finally:
        undeploy(NAME)


def test_a_version_tampered_with_in_the_store_is_refused_before_it_loads(
    serve_app, s3_server, tiny_version_dir
):
    store = published(s3_server, tiny_version_dir, "tampered")
    entry = load_manifest(tiny_version_dir).members[0]
    key = f"{store.prefix}/{TEST_GAME}/{TEST_VERSION}/{entry.artifact}"
    s3_server.client().put_object(Bucket=STORE_BUCKET, Key=key, Body=b"tampered")
    # The cluster builds the application, into a cache folder of this prefix: empty.
    with pytest.raises(DeployFailed) as refused:
        deploy(store_args(tiny_version_dir, store), name=NAME, route_prefix=PREFIX)
    message = str(refused.value)
    assert ArtifactIntegrityError.__name__ in message
    assert entry.artifact in message and entry.sha256 in message
    # The application serving beside it is untouched.
    body = {"player_id": player_id(1), "game": TEST_GAME}
    assert requests.post(f"{serve_app}/v1/offers", json=body, timeout=10).status_code == 200
