"""The RayService against KubeRay's v1 CRD schema, and the operator's rules the schema
cannot express (its CEL rules and Go validation: ray-operator/controllers/ray/utils/
validation.go), checked by hand."""

from __future__ import annotations

import re

import pytest

from tests.unit.k8s.schema import broken_errors, check_group_rules, crd_validator, errors

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.fixture(scope="module")
def validator(kuberay_crd_dir):
    return crd_validator(kuberay_crd_dir, "ray.io_rayservices.yaml")


def test_the_rayservice_matches_the_kuberay_v1_crd(validator, rayservice):
    assert rayservice["apiVersion"] == "ray.io/v1"
    assert errors(validator, rayservice) == []


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (("spec", "rayClusterConfig", "enableInTreeAutoScaling"), True, "Additional properties"),
        (("spec", "rayClusterConfig", "workerGroupSpecs", 0, "maxReplicas"), "14", "not of type"),
        (("spec", "serveConfigV2"), {"applications": []}, "not of type 'string'"),
        (
            (
                "spec",
                "rayClusterConfig",
                "headGroupSpec",
                "template",
                "spec",
                "containers",
                0,
                "imagePullPolicy",
            ),
            3,
            "not of type",
        ),
    ],
)
def test_the_schema_check_catches_typos_and_wrong_types(
    validator, rayservice, path, value, expected
):
    found = broken_errors(validator, rayservice, path, value)
    assert found and any(expected in e for e in found), found


def test_the_operator_rules_the_schema_does_not_express(rayservice):
    spec = rayservice["spec"]
    cluster = spec["rayClusterConfig"]
    name = rayservice["metadata"]["name"]
    # ValidateRayServiceMetadata: DNS-1035 label, room for KubeRay's cluster-name suffix.
    assert len(name) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert spec["upgradeStrategy"]["type"] in {
        "NewCluster",
        "NewClusterWithIncrementalUpgrade",
        "None",
    }
    assert "name" not in cluster["headGroupSpec"].get("headService", {}).get("metadata", {})
    # CEL: managedBy, if set, names the operator or MultiKueue.
    assert spec.get("managedBy", "ray.io/kuberay-operator") in {
        "ray.io/kuberay-operator",
        "kueue.x-k8s.io/multikueue",
    }
    check_group_rules(cluster)
    assert cluster["enableInTreeAutoscaling"] is True
    for group in cluster["workerGroupSpecs"]:
        assert not group.get("suspend"), "suspended worker groups are refused with autoscaling"
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
