"""The objects around the RayService: built-in kinds against Kubernetes' own schemas
(kubernetes-validate, offline), IAM least privilege, the API key's path, the image, the
PodMonitor, the dashboard and the locust Job."""

from __future__ import annotations

import json
import re
import sys

import kubernetes_validate
import pytest
import ray

from app.config.serve_document import ROUTER_IMPORT_PATH
from app.k8s import dockerfile
from app.k8s.render import DASHBOARD_JSON, DEFAULT_OUT, LOCAL_SECRET_FILES
from app.local.processes import PROJECT_ROOT
from tests.unit.k8s.schema import KUBERNETES_VERSION, validate_pod_template

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

# The oldest Kubernetes the README's prerequisites name: schemas of that release.
BUILT_IN = {"Namespace", "ServiceAccount", "ConfigMap", "Job"}


def ray_pods(rayservice):
    cluster = rayservice["spec"]["rayClusterConfig"]
    return [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]


def test_built_in_kinds_match_the_kubernetes_schemas_strictly(committed, rayservice):
    kinds = set()
    for document in committed.values():
        if document.get("kind") in BUILT_IN:
            kinds.add(document["kind"])
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    assert kinds == BUILT_IN
    # The Ray pods' templates too, as core/v1 PodTemplates: the CRD embeds an older copy.
    for template in ray_pods(rayservice):
        validate_pod_template(template)


def test_the_strict_kubernetes_check_is_not_vacuous(committed):
    job = json.loads(json.dumps(committed["loadtest/job.yaml"]))
    job["spec"]["template"]["spec"]["containers"][0]["imagePullpolicy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullpolicy"):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_the_serve_role_reads_only_the_table_the_snapshots_and_the_published_versions(profile):
    policy = json.loads((DEFAULT_OUT / "iam" / "serve-policy.json").read_text())
    statements = policy["Statement"]
    assert statements and all(s["Effect"] == "Allow" for s in statements)
    actions = [a for s in statements for a in s["Action"]]
    assert sorted(actions) == sorted(
        ["dynamodb:GetItem", "dynamodb:BatchGetItem"] + ["s3:GetObject", "s3:ListBucket"] * 2
    )
    assert not [a for a in actions if "*" in a]  # no wildcard action
    aws = profile.aws
    table_arn = f"arn:aws:dynamodb:{aws.region}:{aws.account_id}:table/{profile.dynamodb.table}"
    dynamodb = [s for s in statements if s["Action"][0].startswith("dynamodb:")]
    assert {r for s in dynamodb for r in s["Resource"]} == {table_arn}
    assert "*" not in json.dumps(dynamodb)  # no wildcard table, index or stream
    # S3, read-only: the snapshot files under the batch output prefix (the precomputed tier;
    # tests/unit/k8s/test_batch.py runs the reader against this) and everything under the
    # model store's prefix (the published versions; test_model_store_access.py runs the
    # store against it), each listed only under its prefix.
    batch, store = profile.batch, profile.model_store
    s3 = [s for s in statements if s["Action"][0].startswith("s3:")]
    assert all(len(s["Action"]) == 1 for s in s3)
    reads = sorted(r for s in s3 if s["Action"] == ["s3:GetObject"] for r in s["Resource"])
    assert reads == sorted(
        [
            f"arn:aws:s3:::{batch.bucket()}/{batch.prefix()}/*/_offers.snapshot",
            f"arn:aws:s3:::{store.bucket()}/{store.prefix()}/*",
        ]
    )
    listings = sorted(
        (r, tuple(s["Condition"]["StringLike"]["s3:prefix"]))
        for s in s3
        if s["Action"] == ["s3:ListBucket"]
        for r in s["Resource"]
    )
    assert listings == sorted(
        [
            (f"arn:aws:s3:::{batch.bucket()}", (f"{batch.prefix()}/*",)),
            (f"arn:aws:s3:::{store.bucket()}", (f"{store.prefix()}/*",)),
        ]
    )
    assert all(set(s) <= {"Sid", "Effect", "Action", "Resource", "Condition"} for s in statements)
    assert ["Condition" in s for s in statements] == [
        "s3:ListBucket" in s["Action"] for s in statements
    ]


def test_only_the_services_account_can_assume_the_role(profile, committed, rayservice):
    trust = json.loads((DEFAULT_OUT / "iam" / "serve-trust-policy.json").read_text())
    (statement,) = trust["Statement"]
    account = committed["serviceaccount.yaml"]
    subject = (
        f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    )
    conditions = statement["Condition"]["StringEquals"]
    assert conditions[f"{profile.aws.eks_oidc_provider}:sub"] == subject
    assert conditions[f"{profile.aws.eks_oidc_provider}:aud"] == "sts.amazonaws.com"
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role == f"arn:aws:iam::{profile.aws.account_id}:role/{profile.aws.serve_role_name}"
    cluster = rayservice["spec"]["rayClusterConfig"]
    # Replicas run on workers, and Serve builds the applications on the head, loading their
    # versions from the model store: both get the role.
    head = cluster["headGroupSpec"]["template"]["spec"]
    workers = [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    for spec in [head, *workers]:
        assert spec["serviceAccountName"] == account["metadata"]["name"]
    # The account mounts no API token. KubeRay binds the autoscaler sidecar's RBAC to the
    # head's account: the head pod alone mounts the token, or the autoscaler could not add or
    # remove a single worker; the workers never get one.
    assert account["automountServiceAccountToken"] is False
    assert head["automountServiceAccountToken"] is True
    assert all("automountServiceAccountToken" not in spec for spec in workers)
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # no replica there


def test_the_api_key_digest_comes_from_a_mounted_secret_never_inline(committed, rayservice):
    (generated,) = committed["kustomization.yaml"]["secretGenerator"]
    key, source = generated["files"][0].split("=")
    assert source in LOCAL_SECRET_FILES
    assert f"/{source}" in (DEFAULT_OUT / ".gitignore").read_text().splitlines()
    assert f"k8s/{source}" in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
    for template in ray_pods(rayservice):
        spec = template["spec"]
        (volume,) = [v for v in spec["volumes"] if "secret" in v]
        assert volume["secret"]["secretName"] == generated["name"]
        (container,) = spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["OFFERS_API_KEY_SHA256_FILE"] == f"{mount['mountPath']}/{key}"
        assert "OFFERS_API_KEY_SHA256" not in env
    for path in DEFAULT_OUT.rglob("*"):
        if path.is_file():  # no digest (or any 64-hex secret) committed anywhere in k8s/
            assert not re.search(r"\b[0-9a-f]{64}\b", path.read_text()), path


def test_the_image_is_the_pinned_ray_image_with_no_model(rayservice):
    text = (DEFAULT_OUT / "Dockerfile").read_text()
    python = f"{sys.version_info.major}{sys.version_info.minor}"
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert froms[0] == f"rayproject/ray:{ray.__version__}-py{python}-cpu"
    assert re.search(r"^RUN pip install .*-c constraints\.txt \.", text, re.MULTILINE)
    assert re.search(r"^COPY .*constraints\.txt", text, re.MULTILINE)
    # No trained artifact: versions come from the model store, so the image (and its tag)
    # is the same whatever serve_config.yaml serves.
    copied = re.findall(r"^COPY \S+ (.+) \S+$", text, re.MULTILINE)
    assert copied and not [c for c in copied if "artifacts" in c], copied
    assert "OFFERS_ARTIFACTS_ROOT" not in text
    # Nor in the build context: trained artifacts are published, never sent to the builder.
    assert "models/artifacts" in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
    for stage in text.split("\nFROM ")[1:]:
        users = re.findall(r"^USER (\S+)", stage, re.MULTILINE)
        assert users and users[-1] not in {"root", "0"}, stage.splitlines()[0]
    assert dockerfile.WORKDIR.startswith("/home/ray/")
    # The cluster runs that image, tagged with the same Ray and Python.
    cluster = rayservice["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__
    for template in ray_pods(rayservice):
        image = template["spec"]["containers"][0]["image"]
        assert image.endswith(f"-ray{ray.__version__}-py{python}"), image


def test_every_ray_pod_keeps_the_model_stores_versions_in_a_disk_cache_of_its_own(
    rayservice, profile
):
    from app.k8s.profile import k8s_quantity_gib

    for template in ray_pods(rayservice):
        spec = template["spec"]
        (container,) = spec["containers"]
        cache = {e["name"]: e.get("value") for e in container["env"]}["OFFERS_MODEL_CACHE_DIR"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == cache]
        assert not mount.get("readOnly")
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        # Shared by the pod's replicas, bounded, on disk (memory is what replicas reserve).
        assert volume["emptyDir"] == {"sizeLimit": k8s_quantity_gib(profile.model_store.cache_gib)}


def test_the_kustomizations_apply_files_that_exist(committed):
    for name in ("kustomization.yaml", "loadtest/kustomization.yaml"):
        folder = (DEFAULT_OUT / name).parent
        kustomization = committed[name]
        assert kustomization["resources"]
        for resource in kustomization["resources"]:
            assert (folder / resource).is_file(), resource
            assert committed[str((folder / resource).relative_to(DEFAULT_OUT))]["metadata"]
        (generator,) = kustomization["secretGenerator"]
        source = generator["files"][0].split("=")[1]
        assert str((folder / source).relative_to(DEFAULT_OUT)) in LOCAL_SECRET_FILES


def test_the_pod_monitor_scrapes_ray_and_haproxy_on_every_ray_pod(committed, rayservice, profile):
    assert committed["podmonitor.yaml"]["metadata"]["labels"] == (
        profile.monitoring.pod_monitor_labels
    )
    monitor = committed["podmonitor.yaml"]["spec"]
    wanted = monitor["selector"]["matchLabels"]
    ports = {e["port"] for e in monitor["podMetricsEndpoints"]}
    assert ports == {"metrics", "haproxy-metrics"}
    for template in ray_pods(rayservice):
        assert wanted.items() <= template["metadata"]["labels"].items()
        named = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
        assert ports <= named
    (expression,) = monitor["selector"]["matchExpressions"]
    assert expression["key"] == "ray.io/node-type"  # the label KubeRay puts on Ray pods


def test_the_grafana_dashboard_config_map_is_the_operations_dashboard(committed):
    config_map = committed["grafana-dashboard.yaml"]
    assert config_map["metadata"]["labels"] == {"grafana_dashboard": "1"}
    (content,) = config_map["data"].values()
    assert json.loads(content) == json.loads(DASHBOARD_JSON.read_text())
    assert len(json.dumps(config_map)) < 256 * 1024  # fits kubectl apply's annotation


def test_the_locust_job_runs_the_locustfile_against_the_serve_service(
    committed, rayservice, serve_config_v2
):
    job = committed["loadtest/job.yaml"]
    assert committed["loadtest/kustomization.yaml"]["resources"] == ["job.yaml"]
    assert "loadtest/job.yaml" not in committed["kustomization.yaml"]["resources"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert container["command"] == ["locust"] and args[:2] == ["-f", "loadtest/locustfile.py"]
    assert (PROJECT_ROOT / args[1]).is_file()
    service = rayservice["spec"]["serveService"]
    port = service["spec"]["ports"][0]["port"]
    namespace = rayservice["metadata"]["namespace"]
    assert (
        args[args.index("--host") + 1]
        == f"http://{service['metadata']['name']}.{namespace}.svc:{port}"
    )
    routers = [
        a["route_prefix"]
        for a in serve_config_v2["applications"]
        if a["import_path"] == ROUTER_IMPORT_PATH
    ]
    assert args[args.index("--route-prefix") + 1] in routers
    locustfile = (PROJECT_ROOT / "loadtest" / "locustfile.py").read_text()
    for option in ("--route-prefix", "--user-rps", "--players"):  # the locustfile's own options
        assert f'"{option}"' in locustfile
    (env,) = container["env"]
    assert env["name"] == "OFFERS_API_KEY" and "secretKeyRef" in env["valueFrom"]
    assert "OFFERS_API_KEY" in locustfile
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
