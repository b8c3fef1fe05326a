"""The IAM policies against the model store's own S3 calls (app.adapters.model_store,
through a recorded boto3 client): with the serve role, replicas (and the head, which builds
the applications) load a published version, write nothing there and read nothing else of
the store; with the batch role, the batch RayJobs' driver and scoring actors load the
version their entrypoint names, read-only, the same way; the publisher's policy publishes
and lists, and deletes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path

import pydantic
import pytest
from botocore.exceptions import ClientError

from app.adapters import model_store
from app.adapters.model_store import ModelStore, local_version
from app.batch.cli import parser, to_args
from app.config.settings import Settings
from app.contract.manifest import MANIFEST_FILENAME, load_manifest, write_manifest
from app.k8s.render import DEFAULT_OUT
from tests.support import small_manifest
from tests.unit.k8s.s3_calls import RecordingS3Client, S3Request, allows

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

# The roles of the cluster's pods: both load published versions, neither writes them.
READER_POLICIES = ("serve-policy.json", "batch-policy.json")


def policy(name):
    return json.loads((DEFAULT_OUT / "iam" / name).read_text())


def train(folder, **identity):
    """A version folder as training leaves it: artifacts, and a manifest naming their sha256
    (`identity`: another game or version than small_manifest's)."""
    folder.mkdir(parents=True)
    manifest = small_manifest().model_copy(update=identity)
    members = []
    for entry in manifest.members:
        data = f"the model of {entry.name}".encode()
        (folder / entry.artifact).write_bytes(data)
        members.append(entry.model_copy(update={"sha256": hashlib.sha256(data).hexdigest()}))
    write_manifest(manifest.model_copy(update={"members": members}), folder)
    return folder


@pytest.fixture
def trained(tmp_path):
    return train(tmp_path / "trained")


@pytest.fixture
def bucket(tmp_path, profile):
    """The model store's bucket as a local folder: the publisher (every call allowed) fills
    it, `as_serve_role` reads it with the committed serve policy."""
    root = tmp_path / "bucket"
    root.mkdir()
    return RecordingS3Client(root, profile.model_store.bucket())


def as_role(bucket, policy_name):
    return RecordingS3Client(bucket.root, bucket.bucket, policy=policy(policy_name))


def as_serve_role(bucket):
    return as_role(bucket, "serve-policy.json")


def test_the_serve_role_loads_a_published_version_into_the_node_cache(
    tmp_path, profile, bucket, trained
):
    ModelStore(bucket, profile.model_store.uri).publish(trained)
    manifest = load_manifest(trained)
    serve = as_serve_role(bucket)
    store = ModelStore(serve, profile.model_store.uri)
    cache = tmp_path / "cache"
    folder = store.materialize(manifest.game, manifest.version, cache)
    assert load_manifest(folder) == manifest
    # Again, from the node cache: the one manifest GET that checks the copy is current.
    assert store.materialize(manifest.game, manifest.version, cache) == folder
    actions = {r.action for r in serve.requests}
    assert actions == {"s3:GetObject"}  # read-only, and the calls were made (not vacuous)
    assert all(allows(serve.policy, r) for r in serve.requests)
    version_arn = f"arn:aws:s3:::{bucket.bucket}/{profile.model_store.prefix()}"
    assert all(r.resource.startswith(f"{version_arn}/") for r in serve.requests)


@pytest.mark.parametrize("role", READER_POLICIES)
def test_a_version_that_is_not_published_is_a_404_for_the_reading_roles(
    tmp_path, profile, bucket, role
):
    # S3 answers a missing key 404 only to a caller that may list it: otherwise 403, and the
    # build (or the batch job) would report an access problem instead of "not published".
    reader = as_role(bucket, role)
    with pytest.raises(FileNotFoundError, match="is not published"):
        ModelStore(reader, profile.model_store.uri).materialize("g", "v", tmp_path / "cache")
    listing = [r for r in reader.requests if r.action == "s3:ListBucket"]
    assert listing and all(allows(reader.policy, r) for r in listing)


@pytest.mark.parametrize("role", READER_POLICIES)
def test_the_reading_roles_cannot_publish_or_delete_a_version(
    tmp_path, profile, bucket, trained, role
):
    with pytest.raises(ClientError) as refused:
        ModelStore(as_role(bucket, role), profile.model_store.uri).publish(trained)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert not [p for p in bucket.root.rglob("*") if p.is_file()]  # nothing was written
    # Nor over a published version: its files stay the publisher's bytes.
    uri, _ = ModelStore(bucket, profile.model_store.uri).publish(trained)
    published = {p: p.read_bytes() for p in bucket.root.rglob("*") if p.is_file()}
    reader = as_role(bucket, role)
    for path in trained.iterdir():
        key = f"{uri.removeprefix(f's3://{bucket.bucket}/')}/{path.name}"
        assert bucket.root.joinpath(key).is_file(), key
        with pytest.raises(ClientError) as refused:
            reader.put_object(Bucket=bucket.bucket, Key=key, Body=b"overwritten")
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert {p: p.read_bytes() for p in bucket.root.rglob("*") if p.is_file()} == published
    reader_policy = policy(role)
    version = f"arn:aws:s3:::{profile.model_store.bucket()}/{profile.model_store.prefix()}/g/v"
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        for key in (MANIFEST_FILENAME, "m0.ubj", "sub/folder/x"):
            assert not allows(reader_policy, S3Request(action, f"{version}/{key}")), action


@pytest.mark.parametrize("role", READER_POLICIES)
def test_the_reading_roles_read_nothing_of_the_store_outside_its_prefix(
    tmp_path, profile, bucket, trained, role
):
    name, prefix = profile.model_store.bucket(), profile.model_store.prefix()
    elsewhere = [f"s3://{name}/other", f"s3://{name}/{prefix}x"]  # x: a lookalike prefix
    for uri in elsewhere:
        ModelStore(bucket, uri).publish(trained)
    manifest = load_manifest(trained)
    for uri in elsewhere:
        with pytest.raises(ClientError) as refused:
            ModelStore(as_role(bucket, role), uri).materialize(
                manifest.game, manifest.version, tmp_path / "cache"
            )
        assert refused.value.response["Error"]["Code"] == "AccessDenied", uri
    reader = policy(role)
    assert not allows(reader, S3Request("s3:GetObject", f"arn:aws:s3:::other-{name}/{prefix}/m"))
    assert not allows(reader, S3Request("s3:ListBucket", f"arn:aws:s3:::{name}", None))
    assert not allows(reader, S3Request("s3:ListBucket", f"arn:aws:s3:::{name}", "other/"))


def test_the_publisher_policy_allows_publishing_and_listing_and_no_delete(profile, bucket, trained):
    publisher = RecordingS3Client(bucket.root, bucket.bucket, policy("publish-policy.json"))
    store = ModelStore(publisher, profile.model_store.uri)
    uri, uploaded = store.publish(trained)
    assert uploaded and uri.startswith(f"{profile.model_store.uri}/")
    assert store.publish(trained) == (uri, False)  # again: found, identical, nothing written
    (listed,) = store.versions()
    manifest = load_manifest(trained)
    assert (listed.game, listed.version) == (manifest.game, manifest.version)
    assert {r.action for r in publisher.requests} == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:ListBucket",
    }
    assert all(allows(publisher.policy, r) for r in publisher.requests)
    published = f"arn:aws:s3:::{bucket.bucket}/{profile.model_store.prefix()}/g/v"
    assert not allows(publisher.policy, S3Request("s3:DeleteObject", f"{published}/m.ubj"))
    for outside in (f"{bucket.bucket}/other/g/v/m.ubj", f"other-{bucket.bucket}/m.ubj"):
        assert not allows(publisher.policy, S3Request("s3:PutObject", f"arn:aws:s3:::{outside}"))


def pod_settings(template, monkeypatch, cache: Path) -> Settings:
    """app.batch's settings in one of the RayJob's Ray containers: its environment alone
    (no OFFERS_ variable of this process), the node cache moved to `cache`."""
    (container,) = template["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    for name in [n for n in os.environ if n.startswith("OFFERS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    on_the_pod = Settings()
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(on_the_pod.model_cache_dir) in mounts  # the pod's cache volume
    assert on_the_pod.s3_endpoint_url is None  # AWS S3, IRSA credentials
    return on_the_pod.model_copy(update={"model_cache_dir": cache})


def test_the_batch_role_loads_the_version_each_rayjob_scores(
    tmp_path, profile, bucket, rayjobs, monkeypatch
):
    """What app.batch does on the cluster, `local_version(args.version_source())` on the
    head (the driver's manifest) and on every worker (each scoring actor), with the
    committed RayJob's own entrypoint and pod environment, under the batch policy."""
    for name, job in rayjobs.items():
        args = to_args(parser().parse_args(shlex.split(job["spec"]["entrypoint"])[3:]))
        trained = train(tmp_path / name / "trained", game=args.game, version=args.version)
        ModelStore(bucket, profile.model_store.uri).publish(trained)
        cluster = job["spec"]["rayClusterSpec"]
        templates = [cluster["headGroupSpec"]["template"]] + [
            group["template"] for group in cluster["workerGroupSpecs"]
        ]
        for i, template in enumerate(templates):
            settings = pod_settings(template, monkeypatch, tmp_path / name / f"node-{i}")
            batch = as_role(bucket, "batch-policy.json")
            regions: list[str] = []

            def client(endpoint, region, batch=batch, regions=regions):
                assert endpoint is None
                regions.append(region)
                return batch

            monkeypatch.setattr(model_store, "store_client", client)
            folder = local_version(args.version_source(), settings)
            assert load_manifest(folder) == load_manifest(trained), name
            assert folder.is_relative_to(settings.model_cache_dir)
            assert regions == [profile.aws.region]
            assert {r.action for r in batch.requests} == {"s3:GetObject"}  # read-only
            assert all(allows(batch.policy, r) for r in batch.requests)
            models = f"arn:aws:s3:::{bucket.bucket}/{profile.model_store.prefix()}/"
            assert all(r.resource.startswith(models) for r in batch.requests)


@pytest.mark.parametrize(
    "uri, message",
    [
        ("s3://dynamic-offers-models", "model_store.uri must be"),  # no prefix
        ("s3://dynamic-offers-models/ensembles/", "model_store.uri must be"),
        ("s3://dynamic-offers-models/*", "model_store.uri must be"),
        ("/var/models", "model_store.uri must be"),
        (None, "overlap"),  # the batch output prefix itself
        ("batch-folder", "overlap"),  # a folder under the batch output prefix
    ],
)
def test_the_profile_refuses_a_store_uri_the_roles_could_not_keep_apart(profile, uri, message):
    batch = profile.batch.output_uri
    document = profile.model_dump()
    document["model_store"]["uri"] = (
        batch if uri is None else f"{batch}/{uri}" if not uri.startswith(("s3:", "/")) else uri
    )
    with pytest.raises(pydantic.ValidationError, match=message):
        type(profile).model_validate(document)


def test_the_profile_refuses_a_store_in_the_ensemble_overrides(profile):
    document = profile.model_dump()
    document["serve"]["ensemble_args"]["artifacts"] = "s3://elsewhere/models"
    with pytest.raises(pydantic.ValidationError, match="the store is model_store.uri"):
        type(profile).model_validate(document)
