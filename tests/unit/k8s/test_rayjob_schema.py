"""The batch RayJobs against KubeRay's v1 RayJob CRD schema (vendored, crds/README.md), and
the operator's rules the schema cannot express (its CEL rules and Go validation:
ray-operator/controllers/ray/utils/validation.go, ValidateRayJobMetadata and
ValidateRayJobSpec), checked by hand."""

from __future__ import annotations

import hashlib
import re

import pytest

from tests.unit.k8s.schema import (
    VENDORED_CRDS,
    broken_errors,
    check_group_rules,
    crd_validator,
    errors,
    load_crd,
    v1_schema,
)

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

RAYJOB_CRD = "ray.io_rayjobs.yaml"
UPSTREAM_BLOB = "c7d3f081af8cf08c256a8c33a0c3b6ea28b816a0"  # crds/README.md


@pytest.fixture(scope="module")
def validator():
    return crd_validator(VENDORED_CRDS, RAYJOB_CRD)


def test_the_vendored_crd_is_kuberays_file_unmodified():
    data = (VENDORED_CRDS / RAYJOB_CRD).read_bytes()
    # The git blob id of the file at the pinned commit: any edit changes it.
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert blob == UPSTREAM_BLOB
    assert UPSTREAM_BLOB in (VENDORED_CRDS / "README.md").read_text()
    crd = load_crd(data)
    assert crd["metadata"]["name"] == "rayjobs.ray.io"
    assert crd["spec"]["names"]["kind"] == "RayJob"


def test_the_vendored_crd_is_the_same_kuberay_as_the_shared_crds(kuberay_crd_dir):
    # The RayJob embeds a RayClusterSpec: at the same KubeRay commit it is the RayCluster
    # CRD's spec, and the RayService's rayClusterConfig, exactly.
    in_job = v1_schema(VENDORED_CRDS, RAYJOB_CRD)["properties"]["spec"]["properties"]
    cluster_spec = v1_schema(kuberay_crd_dir, "ray.io_rayclusters.yaml")["properties"]["spec"]
    service = v1_schema(kuberay_crd_dir, "ray.io_rayservices.yaml")["properties"]["spec"]
    assert in_job["rayClusterSpec"] == cluster_spec
    assert service["properties"]["rayClusterConfig"] == cluster_spec


def test_every_rayjob_matches_the_kuberay_v1_crd(validator, rayjobs):
    for name, job in rayjobs.items():
        assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob", name
        assert errors(validator, job) == [], name


HEAD_POD = ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec")


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (("spec", "shutdownAfterJobFinish"), True, "Additional properties"),
        (("spec", "rayClusterSpec", "enableInTreeAutoScaling"), False, "Additional properties"),
        (("spec", "backoffLimit"), "1", "not of type"),
        (("spec", "entrypoint"), ["python", "-m", "app.batch"], "not of type 'string'"),
        (("spec", "rayClusterSpec", "workerGroupSpecs", 0, "replica"), 4, "Additional properties"),
        ((*HEAD_POD, "serviceAcountName"), "x", "Additional properties"),
        ((*HEAD_POD, "containers", 0, "imagePullPolicy"), 3, "not of type"),
        (("spec", "submitterPodTemplate", "spec", "automountToken"), False, "Additional"),
    ],
)
def test_the_schema_check_catches_typos_and_wrong_types(validator, rayjobs, path, value, expected):
    found = broken_errors(validator, next(iter(rayjobs.values())), path, value)
    assert found and any(expected in e for e in found), found


def test_the_operator_rules_the_schema_does_not_express(rayjobs):
    for file, job in rayjobs.items():
        name = job["metadata"]["name"]
        spec = job["spec"]
        cluster = spec["rayClusterSpec"]
        # ValidateRayJobMetadata: DNS-1035 label, room for KubeRay's cluster-name suffix; the
        # head Service KubeRay makes for a RayJob (`<name>-head-svc`) within 63.
        assert len(name) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), file
        assert len(f"{name}-head-svc") <= 63
        # A submitter pod template (and its retries) exists in K8sJobMode only.
        assert spec["submissionMode"] == "K8sJobMode"
        # Deletion: a TTL needs shutdownAfterJobFinishes; no deletionStrategy (feature gate).
        assert spec["shutdownAfterJobFinishes"] is True
        assert spec["ttlSecondsAfterFinished"] >= 0
        assert "deletionStrategy" not in spec
        assert not spec.get("suspend") and not spec.get("clusterSelector")
        assert spec["activeDeadlineSeconds"] > 0 and spec["backoffLimit"] >= 0
        # The settings are in the containers' environment, not a runtime_env (which KubeRay
        # only checks to be YAML).
        assert "runtimeEnvYAML" not in spec
        # CEL on managedBy, of the job and of its cluster.
        for owner in (spec, cluster):
            assert owner.get("managedBy", "ray.io/kuberay-operator") in {
                "ray.io/kuberay-operator",
                "kueue.x-k8s.io/multikueue",
            }
        # The submitter: a Job's pod (restartPolicy Never), KubeRay's container first, no
        # command of ours (KubeRay writes `ray job submit`).
        submitter = spec["submitterPodTemplate"]["spec"]
        assert submitter["restartPolicy"] == "Never"
        assert submitter["containers"][0]["name"] == "ray-job-submitter"
        assert "command" not in submitter["containers"][0]
        assert "args" not in submitter["containers"][0]
        # ValidateRayClusterSpec, autoscaling off: every group sets min and max replicas.
        assert cluster.get("enableInTreeAutoscaling") is False
        assert "autoscalerOptions" not in cluster
        check_group_rules(cluster)
        for group in cluster["workerGroupSpecs"]:
            assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
            assert group["minReplicas"] == group["maxReplicas"], "a fixed-size cluster"
            assert not group.get("suspend")
        for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
            env = group["template"]["spec"]["containers"][0].get("env", [])
            # Autoscaler v2 cannot be asked for with autoscaling off.
            assert {e["name"]: e.get("value") for e in env}.get(
                "RAY_enable_autoscaler_v2"
            ) not in {"1", "true"}
        assert "restartPolicy" not in cluster["headGroupSpec"]["template"]["spec"]
        # K8s token auth is refused for RayJob: Ray's own token only.
        assert cluster["authOptions"] == {"mode": "token"}
        for feature_gated in ("networkPolicy", "tlsOptions", "historyServerOptions"):
            assert feature_gated not in cluster
