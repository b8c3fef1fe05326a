"""The model store against a real S3-protocol server (moto's server mode, as `make run`
starts it): publish and list, immutability, the node cache, a tampered artifact, and the
store down with and without a cache."""

from __future__ import annotations

import json
import shutil

import pytest

from app.adapters.model_store import (
    ModelStore,
    StoreUnavailable,
    VersionConflict,
    cached,
)
from app.contract.artifacts import ArtifactIntegrityError, sha256_of
from app.contract.manifest import MANIFEST_FILENAME, load_manifest
from app.local.processes import free_port
from app.local.s3_server import local_s3_client
from tests.integration.conftest import STORE_BUCKET as BUCKET

pytestmark = pytest.mark.integration


@pytest.fixture
def s3(s3_server):
    """The session's S3-protocol server (tests/integration/conftest.py), bucket made."""
    return s3_server


@pytest.fixture
def store(s3, request):
    # Each test its own prefix: published versions never change, so tests must not share.
    return ModelStore(s3.client(), f"s3://{BUCKET}/{request.node.name}", sleep=lambda _s: None)


def test_a_published_version_is_listed_with_its_members_auc_and_size(store, tiny_version_dir):
    manifest = load_manifest(tiny_version_dir)
    uri, uploaded = store.publish(tiny_version_dir)
    assert uploaded and uri == f"{store.uri}/{manifest.game}/{manifest.version}"
    [listed] = store.versions()
    assert (listed.game, listed.version) == (manifest.game, manifest.version)
    assert listed.members == len(manifest.members)
    assert listed.auc == manifest.ensemble_auc
    files = [tiny_version_dir / MANIFEST_FILENAME] + [
        tiny_version_dir / name
        for e in manifest.members
        for name in [e.artifact] + ([e.serving.artifact] if e.serving else [])
    ]
    assert listed.size_bytes == sum(f.stat().st_size for f in files)
    # Publishing it again is a no-op: the same manifest names the same files.
    assert store.publish(tiny_version_dir) == (uri, False)


def test_a_published_version_never_changes(store, tiny_version_dir, tmp_path):
    store.publish(tiny_version_dir)
    changed = tmp_path / "changed"
    shutil.copytree(tiny_version_dir, changed)
    document = json.loads((changed / MANIFEST_FILENAME).read_text())
    document["members"][0]["weight"] *= 2  # same files, another ensemble
    (changed / MANIFEST_FILENAME).write_text(json.dumps(document))
    with pytest.raises(VersionConflict, match="already published with another manifest"):
        store.publish(changed)


def test_a_broken_local_version_is_never_published(store, tiny_version_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_version_dir, broken)
    victim = load_manifest(broken).members[0].artifact
    (broken / victim).write_bytes(b"not the trained model")
    with pytest.raises(ArtifactIntegrityError, match="sha256 mismatch"):
        store.publish(broken)
    assert store.versions() == []


def test_the_node_cache_is_filled_once_and_verified(store, tiny_version_dir, tmp_path):
    manifest = load_manifest(tiny_version_dir)
    store.publish(tiny_version_dir)
    folder = store.materialize(manifest.game, manifest.version, tmp_path / "cache")
    assert cached(folder)
    for entry in manifest.members:
        assert sha256_of(folder / entry.artifact) == entry.sha256
    stamp = (folder / MANIFEST_FILENAME).stat().st_mtime_ns
    # A second replica on the node finds it whole: nothing is copied again.
    assert store.materialize(manifest.game, manifest.version, tmp_path / "cache") == folder
    assert (folder / MANIFEST_FILENAME).stat().st_mtime_ns == stamp


def test_a_tampered_artifact_in_the_store_is_refused_with_both_hashes(
    store, s3, tiny_version_dir, tmp_path
):
    manifest = load_manifest(tiny_version_dir)
    store.publish(tiny_version_dir)
    entry = manifest.members[0]
    key = f"{store.prefix}/{manifest.game}/{manifest.version}/{entry.artifact}"
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"tampered")
    with pytest.raises(ArtifactIntegrityError) as refused:
        store.materialize(manifest.game, manifest.version, tmp_path / "cache")
    message = str(refused.value)
    assert entry.artifact in message and entry.sha256 in message
    assert sha256_of_bytes(b"tampered") in message
    assert not cached(store.cache_folder(manifest.game, manifest.version, tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("*.partial")), "the partial copy is removed"


def test_with_the_store_down_a_complete_node_cache_serves(store, tiny_version_dir, tmp_path):
    manifest = load_manifest(tiny_version_dir)
    store.publish(tiny_version_dir)
    cache = tmp_path / "cache"
    folder = store.materialize(manifest.game, manifest.version, cache)
    waits: list[float] = []
    down = ModelStore(dead_client(), store.uri, sleep=waits.append)
    assert down.materialize(manifest.game, manifest.version, cache) == folder
    assert waits == [], "a node that has the version does not wait for a store that is down"


def test_a_store_filled_again_with_other_bits_replaces_the_node_cache_copy(
    store, s3, tiny_version_dir, tmp_path
):
    manifest = load_manifest(tiny_version_dir)
    store.publish(tiny_version_dir)
    cache = tmp_path / "cache"
    folder = store.materialize(manifest.game, manifest.version, cache)
    # The store is emptied (the local server restarted) and the version published again
    # from a retrained folder: the store's copy wins over the node's.
    emptied(s3, store)
    retrained = tmp_path / "retrained"
    shutil.copytree(tiny_version_dir, retrained)
    document = json.loads((retrained / MANIFEST_FILENAME).read_text())
    document["members"][0]["weight"] *= 2
    (retrained / MANIFEST_FILENAME).write_text(json.dumps(document))
    store.publish(retrained)
    assert store.materialize(manifest.game, manifest.version, cache) == folder
    assert (folder / MANIFEST_FILENAME).read_bytes() == (retrained / MANIFEST_FILENAME).read_bytes()
    assert cached(folder)


def test_a_version_the_store_does_not_hold_is_refused_even_with_a_node_copy(
    store, s3, tiny_version_dir, tmp_path
):
    manifest = load_manifest(tiny_version_dir)
    store.publish(tiny_version_dir)
    cache = tmp_path / "cache"
    store.materialize(manifest.game, manifest.version, cache)
    emptied(s3, store)
    with pytest.raises(FileNotFoundError, match="is not published"):
        store.materialize(manifest.game, manifest.version, cache)


def test_with_the_store_down_and_no_cache_it_says_so_after_retries(store, tmp_path):
    waits: list[float] = []
    down = ModelStore(dead_client(), store.uri, sleep=waits.append)
    with pytest.raises(StoreUnavailable, match="the model store did not answer"):
        down.materialize("galaxy-raiders", "2026-11", tmp_path / "cache")
    assert waits == sorted(waits) and len(waits) >= 3  # backing off


def test_a_manifest_in_the_store_cannot_write_outside_the_cache(
    store, s3, tiny_version_dir, tmp_path
):
    document = json.loads((tiny_version_dir / MANIFEST_FILENAME).read_text())
    document["members"][0]["artifact"] = "../../../escaped.ubj"
    key = f"{store.prefix}/{document['game']}/{document['version']}/{MANIFEST_FILENAME}"
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=json.dumps(document).encode())
    with pytest.raises(ArtifactIntegrityError, match="leaves the version's folder"):
        store.materialize(document["game"], document["version"], tmp_path / "cache")
    assert not list(tmp_path.rglob("escaped.ubj"))


def test_two_stores_versions_of_one_name_never_share_a_cache_folder(s3, tmp_path):
    a = ModelStore(s3.client(), f"s3://{BUCKET}/a")
    b = ModelStore(s3.client(), f"s3://{BUCKET}/b")
    assert a.cache_folder("g", "v", tmp_path) != b.cache_folder("g", "v", tmp_path)


def emptied(s3, store: ModelStore) -> None:
    """Every object under the store's prefix deleted (one client: each costs ~0.2 s)."""
    client = s3.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{store.prefix}/")
    for item in listed["Contents"]:
        client.delete_object(Bucket=BUCKET, Key=item["Key"])


def dead_client():
    return local_s3_client(f"http://127.0.0.1:{free_port()}", timeout_s=0.5)


def sha256_of_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_offers_publish_and_versions_through_the_cli(s3, tiny_version_dir):
    import os
    import subprocess
    import sys

    from tests.conftest import TEST_GAME, TEST_VERSION

    env = {
        **os.environ,
        "OFFERS_MODEL_STORE_URI": f"s3://{BUCKET}/cli",
        "OFFERS_S3_ENDPOINT_URL": s3.endpoint_url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
    }

    def offers(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.local.cli", *args],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    publish = ("publish", "--game", TEST_GAME, "--version", TEST_VERSION, "--profile", "tiny")
    first = offers(*publish)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"published s3://{BUCKET}/cli/{TEST_GAME}/{TEST_VERSION}")
    again = offers(*publish)
    assert again.returncode == 0 and again.stdout.startswith("already published, identical")
    listed = offers("versions")
    assert listed.returncode == 0, listed.stderr
    [row] = listed.stdout.splitlines()[1:]
    members = len(load_manifest(tiny_version_dir).members)
    assert row.split()[:3] == [TEST_GAME, TEST_VERSION, str(members)]
    missing = offers("publish", "--game", TEST_GAME, "--version", "1999-01", "--profile", "tiny")
    assert missing.returncode == 2 and "no trained version" in missing.stderr
