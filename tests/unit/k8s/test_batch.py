"""The batch-scoring RayJobs (k8s/batch/): what they run, as whom, with which rights, on
which pods; and both IAM roles against the S3 calls the snapshot's writer and reader make.
The batch role against the model store's calls: test_model_store_access.py."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest
import ray

from app.adapters import snapshot_store
from app.batch.cli import parser, to_args
from app.contract import offer_snapshot as snap
from app.k8s import iam
from app.k8s.profile import k8s_quantity_gib
from app.k8s.rayjob import BatchConfigError, BatchTarget, batch_documents, job_name
from app.k8s.render import DEFAULT_OUT
from app.local.serve_config import BUILDER_IMPORT_PATH
from tests.support import small_manifest
from tests.unit.k8s.s3_calls import RecordingS3, S3Request, allows
from tests.unit.k8s.schema import validate_pod_template

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

# app.batch's interface: the only options a RayJob may pass it.
BATCH_OPTIONS = {
    "--game",
    "--version",
    "--profile",
    "--artifacts",
    "--segments",
    "--read-budget",
    "--read-budget-unit",
    "--batch-size",
    "--actors",
    "--actor-num-cpus",
}
BATCH_ENV = ("OFFERS_DYNAMODB_TABLE", "OFFERS_AWS_REGION", "OFFERS_BATCH_OUTPUT_URI")


def entrypoint(job):
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "app.batch"]
    assert {a for a in argv[3:] if a.startswith("--")} <= BATCH_OPTIONS
    return parser().parse_args(argv[3:])


def ray_templates(job):
    cluster = job["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]


def served_apps(serve_config_v2):
    return [a for a in serve_config_v2["applications"] if a["import_path"] == BUILDER_IMPORT_PATH]


def policy(name):
    return json.loads((DEFAULT_OUT / "iam" / name).read_text())


def test_one_rayjob_per_served_version_runs_app_batch_on_it(rayjobs, serve_config_v2, profile):
    served = {
        (a["args"]["profile"], a["args"]["game"], str(a["args"]["version"]))
        for a in served_apps(serve_config_v2)
    }
    scored = {}
    budgets = 0.0
    for name, job in rayjobs.items():
        ns = entrypoint(job)
        args = to_args(ns)  # app.batch's own typed args accept it
        scored[(args.profile, args.game, args.version)] = name
        knobs = profile.batch.job
        assert args.segments == knobs.segments
        assert (args.min_actors, args.max_actors) == (knobs.min_actors, knobs.max_actors)
        assert args.actor_num_cpus == knobs.actor_num_cpus
        assert args.batch_size == knobs.batch_size
        assert args.read_budget_unit == knobs.read_budget_unit
        assert args.output_uri is None  # OFFERS_BATCH_OUTPUT_URI, where supervisors look
        # The published version, from the store the replicas load it from: the image holds
        # no model, so a local folder (artifacts_root) would not be there.
        assert args.artifacts == profile.model_store.uri
        assert args.artifacts_root is None
        assert args.version_source() == f"{profile.model_store.uri}/{args.game}/{args.version}"
        budgets += args.read_budget_per_s
        assert name == f"batch/rayjob-{args.game}-{args.version}.yaml"
    assert set(scored) == served and len(rayjobs) == len(served)
    # The very store serveConfigV2 loads every served version from.
    assert {a["args"]["artifacts"] for a in served_apps(serve_config_v2)} == {
        profile.model_store.uri
    }
    # The jobs run at once: together they read what the profile allows, no more.
    assert budgets == pytest.approx(profile.batch.job.table_read_budget_per_s)


def test_the_batch_kustomization_is_applied_on_its_own(committed, rayjobs, profile):
    kustomization = committed["batch/kustomization.yaml"]
    assert kustomization["namespace"] == profile.namespace
    assert "secretGenerator" not in kustomization  # the job needs no API key
    resources = kustomization["resources"]
    assert sorted(f"batch/{r}" for r in resources) == sorted(
        ["batch/serviceaccount.yaml", *rayjobs]
    )
    for resource in resources:
        assert (DEFAULT_OUT / "batch" / resource).is_file()
    # `kubectl apply -k k8s/` deploys the service and never starts a job.
    assert not [r for r in committed["kustomization.yaml"]["resources"] if "batch" in r]
    for job in rayjobs.values():
        assert job["metadata"]["namespace"] == profile.namespace


def test_head_and_workers_run_as_the_batch_account_which_has_the_batch_role(
    committed, rayjobs, rayservice, profile
):
    account = committed["batch/serviceaccount.yaml"]
    name = account["metadata"]["name"]
    assert name == profile.batch.service_account
    assert name != committed["serviceaccount.yaml"]["metadata"]["name"]
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role == f"arn:aws:iam::{profile.aws.account_id}:role/{profile.batch.role_name}"
    assert (
        role
        != committed["serviceaccount.yaml"]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    )
    # No autoscaler in a fixed-size cluster, so nothing here calls the Kubernetes API.
    assert account["automountServiceAccountToken"] is False
    for job in rayjobs.values():
        cluster = job["spec"]["rayClusterSpec"]
        assert cluster["enableInTreeAutoscaling"] is False
        # The driver (the version's manifest, the snapshot) on the head and the workers
        # (the version, the Scan, Parquet) all need AWS: the batch role, never none.
        for template in ray_templates(job):
            assert template["spec"]["serviceAccountName"] == name
        assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
        # The submitter only talks to the dashboard: no role, no API token.
        submitter = job["spec"]["submitterPodTemplate"]["spec"]
        assert "serviceAccountName" not in submitter
        assert submitter["automountServiceAccountToken"] is False
        # Not selected by the service's PodMonitor or Serve service.
        for template in [*ray_templates(job), job["spec"]["submitterPodTemplate"]]:
            labels = template["metadata"]["labels"]
            assert labels["app.kubernetes.io/instance"] != rayservice["metadata"]["name"]


def test_every_ray_container_reads_the_table_and_writes_where_supervisors_look(
    rayjobs, serve_config_v2, profile
):
    (expected,) = {
        tuple(a["runtime_env"]["env_vars"][k] for k in BATCH_ENV)
        for a in served_apps(serve_config_v2)
    }
    assert expected == (profile.dynamodb.table, profile.aws.region, profile.batch.output_uri)
    for job in rayjobs.values():
        for template in ray_templates(job):
            (container,) = template["spec"]["containers"]
            env = {e["name"]: e["value"] for e in container["env"]}
            assert tuple(env[k] for k in BATCH_ENV) == expected
            assert not [k for k in env if k.startswith("AWS_")]  # IRSA only
            assert "OFFERS_DYNAMODB_ENDPOINT_URL" not in env


def test_every_ray_pod_loads_the_version_through_the_services_node_cache(
    rayjobs, rayservice, profile
):
    """The driver (head) and the scoring actors (workers) materialize the version into
    OFFERS_MODEL_CACHE_DIR: the same volume, mount and variable as the RayService's pods."""

    def cache_of(template):
        spec = template["spec"]
        (container,) = spec["containers"]
        folder = {e["name"]: e["value"] for e in container["env"]}["OFFERS_MODEL_CACHE_DIR"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        return folder, mount, volume

    cluster = rayservice["spec"]["rayClusterConfig"]
    (expected,) = {
        json.dumps(cache_of(t), sort_keys=True)
        for t in [cluster["headGroupSpec"]["template"]]
        + [g["template"] for g in cluster["workerGroupSpecs"]]
    }
    for job in rayjobs.values():
        for template in ray_templates(job):
            folder, mount, volume = cache_of(template)
            assert json.dumps((folder, mount, volume), sort_keys=True) == expected
            assert not mount.get("readOnly")
            # Bounded, on disk: memory is the actors'.
            assert volume["emptyDir"] == {
                "sizeLimit": k8s_quantity_gib(profile.model_store.cache_gib)
            }


def test_the_rayjobs_run_the_services_image_as_non_root(rayjobs, rayservice):
    service_cluster = rayservice["spec"]["rayClusterConfig"]
    image = service_cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    for job in rayjobs.values():
        cluster = job["spec"]["rayClusterSpec"]
        assert cluster["rayVersion"] == service_cluster["rayVersion"] == ray.__version__
        templates = [*ray_templates(job), job["spec"]["submitterPodTemplate"]]
        for template in templates:
            spec = template["spec"]
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["securityContext"]["runAsUser"] == 1000
            for container in spec["containers"]:
                assert container["image"] == image
                assert container["securityContext"]["allowPrivilegeEscalation"] is False
                assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
                assert container["resources"]["requests"] == container["resources"]["limits"]
        for group in cluster["workerGroupSpecs"]:
            spec = group["template"]["spec"]
            (shm,) = [v for v in spec["volumes"] if v["name"] == "shared-mem"]
            assert shm["emptyDir"]["medium"] == "Memory"
            size_mib = int(shm["emptyDir"]["sizeLimit"].removesuffix("Mi"))
            assert size_mib * 2**20 > int(group["rayStartParams"]["object-store-memory"])
            mounts = spec["containers"][0]["volumeMounts"]
            assert {"name": "shared-mem", "mountPath": "/dev/shm"} in mounts


def test_the_pod_templates_match_the_kubernetes_schemas_strictly(rayjobs):
    for job in rayjobs.values():
        for template in [*ray_templates(job), job["spec"]["submitterPodTemplate"]]:
            validate_pod_template(template)


def test_the_fixed_worker_group_holds_every_read_task_and_actor_at_once(rayjobs):
    for job in rayjobs.values():
        args = to_args(entrypoint(job))
        (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        cpus = group["replicas"] * float(limits["cpu"])
        wanted = args.max_actors * args.actor_num_cpus + args.segments * args.read_num_cpus
        assert wanted + 1 <= cpus  # a CPU to spare for the Parquet writes
        assert args.actor_num_cpus <= float(limits["cpu"])


def test_a_profile_the_batch_cannot_run_on_is_refused(profile):
    targets = [BatchTarget("standard", "galaxy-raiders", "2026-11")]
    big = profile.batch.model_copy(
        update={"job": profile.batch.job.model_copy(update={"max_actors": 40})}
    )
    with pytest.raises(BatchConfigError, match="exceeds 4 workers x 7 = 28"):
        batch_documents(
            profile.model_copy(update={"batch": big}), targets, image="i", ray_version="2.60.0"
        )
    long_name = profile.model_copy(update={"name": "dynamic-offers-production-eu"})
    with pytest.raises(BatchConfigError, match="at most 47 characters"):
        job_name(long_name, targets[0])
    with pytest.raises(BatchConfigError, match="DNS-1035"):
        job_name(profile, BatchTarget("standard", "galaxy-raiders", "2026.11"))
    twice = [*targets, BatchTarget("heavy", "galaxy-raiders", "2026-11")]
    with pytest.raises(BatchConfigError, match="more than one profile"):
        batch_documents(profile, twice, image="i", ray_version="2.60.0")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"output_uri": "s3://bucket-name/offers/*"}, "batch.output_uri"),
        ({"output_uri": "s3://bucket-name/offers/"}, "batch.output_uri"),
        ({"output_uri": "s3://bucket-name"}, "batch.output_uri"),
        ({"output_uri": "/var/batch"}, "batch.output_uri"),
        ({"output_uri": "s3://bucket-name/${aws:username}"}, "batch.output_uri"),
        ({"service_account": "dynamic-offers-serve"}, "must differ from service_account"),
        ({"role_name": "dynamic-offers-serve"}, "must differ from aws.serve_role_name"),
        ({"job": {"min_actors": 5, "max_actors": 4}}, "min_actors exceeds"),
    ],
)
def test_the_profile_refuses_unsafe_batch_settings(profile, change, message):
    document = profile.model_dump()
    for key, value in change.items():
        current = document["batch"][key]
        document["batch"][key] = {**current, **value} if isinstance(current, dict) else value
    with pytest.raises(pydantic.ValidationError, match=message.replace("$", r"\$")):
        type(profile).model_validate(document)


def test_the_batch_role_scans_the_one_table_writes_only_under_the_prefix_reads_the_models(
    profile,
):
    statements = policy("batch-policy.json")["Statement"]
    assert all(s["Effect"] == "Allow" for s in statements)
    assert all(set(s) <= {"Sid", "Effect", "Action", "Resource", "Condition"} for s in statements)
    actions = [a for s in statements for a in s["Action"]]
    assert sorted(actions) == sorted(
        [
            "dynamodb:Scan",
            "s3:PutObject",
            "s3:AbortMultipartUpload",
            "s3:GetObject",
            "s3:DeleteObject",
            "s3:ListBucket",
            # The model store: read-only.
            "s3:GetObject",
            "s3:ListBucket",
        ]
    )
    assert not [a for a in actions if "*" in a or "?" in a]  # no wildcard action
    bucket, prefix = profile.batch.bucket(), profile.batch.prefix()
    store_bucket, store_prefix = profile.model_store.bucket(), profile.model_store.prefix()
    aws = profile.aws
    table_arn = f"arn:aws:dynamodb:{aws.region}:{aws.account_id}:table/{profile.dynamodb.table}"
    listings, model_reads = set(), 0
    for s in statements:
        service = {a.split(":")[0] for a in s["Action"]}
        assert len(service) == 1, s
        if service == {"dynamodb"}:
            assert s["Resource"] == [table_arn] and "Condition" not in s
        elif s["Action"] == ["s3:ListBucket"]:
            (resource,) = s["Resource"]
            (listed,) = s["Condition"]["StringLike"]["s3:prefix"]
            assert s["Condition"] == {"StringLike": {"s3:prefix": [listed]}}
            listings.add((resource, listed))
        elif s["Resource"] == [f"arn:aws:s3:::{store_bucket}/{store_prefix}/*"]:
            assert s["Action"] == ["s3:GetObject"] and "Condition" not in s  # never a write
            model_reads += 1
        else:
            (resource,) = s["Resource"]
            assert resource.startswith(f"arn:aws:s3:::{bucket}/{prefix}/"), resource
            assert "Condition" not in s
    assert listings == {
        (f"arn:aws:s3:::{bucket}", f"{prefix}/*"),
        (f"arn:aws:s3:::{store_bucket}", f"{store_prefix}/*"),
    }
    assert model_reads == 1
    # Deleting is for the snapshot's temporary name only: never a finished run's files.
    run = f"arn:aws:s3:::{bucket}/{prefix}/game=g/version=v/run=20261123T000000Z"
    denied = [f"{run}/{snap.SNAPSHOT_FILENAME}", f"{run}/part-0.parquet", f"{run}/_SUCCESS.json"]
    for resource in denied:
        assert not allows(policy("batch-policy.json"), S3Request("s3:DeleteObject", resource))
    # Nothing outside the prefix, and no bucket-wide listing (HeadBucket).
    batch = policy("batch-policy.json")
    assert not allows(batch, S3Request("s3:PutObject", f"arn:aws:s3:::{bucket}/other/x"))
    assert not allows(batch, S3Request("s3:PutObject", f"arn:aws:s3:::{bucket}/{prefix}x/y"))
    assert not allows(batch, S3Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", None))
    assert not allows(batch, S3Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", "other/"))


def test_only_the_batch_account_can_assume_the_batch_role(profile, committed):
    (statement,) = policy("batch-trust-policy.json")["Statement"]
    account = committed["batch/serviceaccount.yaml"]["metadata"]
    provider = profile.aws.eks_oidc_provider
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Principal"] == {
        "Federated": f"arn:aws:iam::{profile.aws.account_id}:oidc-provider/{provider}"
    }
    assert statement["Condition"] == {
        "StringEquals": {
            f"{provider}:sub": f"system:serviceaccount:{account['namespace']}:{account['name']}",
            f"{provider}:aud": "sts.amazonaws.com",
        }
    }


NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def write_parquet_run(root, manifest, scored_at, players):
    folder = (
        root / snap.version_prefix(manifest.game, manifest.version) / snap.run_folder(scored_at)
    )
    folder.mkdir(parents=True)
    offers = [o.offer_id for o in manifest.offers]
    table = pa.table(
        {
            "player_id": players,
            "offer_id": [offers[i % len(offers)] for i in range(len(players))],
            "propensity": [0.5] * len(players),
        }
    )
    pq.write_table(table, folder / "part-0.parquet")
    return folder


@pytest.fixture
def bucket(tmp_path, profile, monkeypatch):
    """The output prefix as a recorded local folder; snapshot_store uses it for every URI."""
    recorder = RecordingS3(str(tmp_path), profile.batch.bucket(), profile.batch.prefix())
    monkeypatch.setattr(snapshot_store, "_filesystem", lambda uri: (recorder.filesystem, uri))
    return recorder


def test_the_batch_role_allows_every_s3_call_of_the_snapshot_writer(tmp_path, bucket):
    manifest = small_manifest()
    run = write_parquet_run(tmp_path, manifest, NOW, ["a", "b", "c"])
    path, header, _ = snapshot_store.write_snapshot(str(run), manifest, NOW)
    assert path.endswith(snap.SNAPSHOT_FILENAME) and header.players == 3
    assert bucket.requests  # the writer went through the recorded filesystem
    batch = policy("batch-policy.json")
    refused = [str(r) for r in bucket.requests if not allows(batch, r)]
    assert refused == [], "the batch role lacks what the snapshot writer does"
    # The move into place is the only delete, and it is allowed by name.
    deletes = {r.resource for r in bucket.requests if r.action == "s3:DeleteObject"}
    assert deletes == {f"arn:aws:s3:::{bucket.bucket}/{bucket.key(path)}.partial"}
    assert iam.SNAPSHOT_PARTIAL == f"{snap.SNAPSHOT_FILENAME}.partial"


def test_the_serve_role_allows_every_s3_call_of_the_snapshot_reader_and_writes_nothing(
    tmp_path, bucket
):
    manifest = small_manifest()
    done = write_parquet_run(tmp_path, manifest, NOW - timedelta(hours=2), ["a", "b"])
    snapshot_store.write_snapshot(str(done), manifest, NOW - timedelta(hours=2))
    write_parquet_run(tmp_path, manifest, NOW - timedelta(minutes=5), ["a", "b"])  # running
    bucket.requests.clear()
    found = snapshot_store.latest_snapshot(
        str(tmp_path), manifest, max_age_s=36 * 3600, clock=NOW.timestamp
    )
    assert found is not None and found[1].startswith(str(done))
    assert bucket.requests
    serve = policy("serve-policy.json")
    refused = [str(r) for r in bucket.requests if not allows(serve, r)]
    assert refused == [], "the serve role lacks what the snapshot reader does"
    # Read-only, and only the finished snapshots: no Parquet, no half-written file.
    prefix_arn = f"arn:aws:s3:::{bucket.bucket}/{bucket.prefix}"
    run = f"{prefix_arn}/game=g/version=v/run=20261123T000000Z"
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert not allows(serve, S3Request(action, f"{run}/{snap.SNAPSHOT_FILENAME}"))
    for name in ("part-0.parquet", f"{snap.SNAPSHOT_FILENAME}.partial", "_SUCCESS.json"):
        assert not allows(serve, S3Request("s3:GetObject", f"{run}/{name}"))
