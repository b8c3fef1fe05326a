"""An application whose args name a model store: its replicas load the published version
through the node cache and answer as the one loaded from the training folder. (A version
tampered with in the store is refused, both hashes named: through `serve deploy` and `serve
status` in tests/e2e/test_serve_deploy.py, the check itself in
tests/integration/adapters/test_model_store.py.)"""

from __future__ import annotations

import pytest
import requests

from app.adapters.model_store import ModelStore, cached
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_VERSION
from tests.integration.conftest import STORE_BUCKET, app_args, deploy, undeploy

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
