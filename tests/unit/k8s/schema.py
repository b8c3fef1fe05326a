"""KubeRay CRD schemas as strict JSON-schema validators (shared by the RayService and RayJob
tests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# CRDs the shared KubeRay folder does not hold, vendored unmodified (crds/README.md).
VENDORED_CRDS = Path(__file__).parent / "crds"


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused, as `kubectl apply --validate=strict` does.

    The API server prunes fields a structural schema does not declare, silently: a misspelt
    `enableInTreeAutoScaling` would be dropped and autoscaling left off. So every object
    schema that lists its properties and does not preserve unknown fields gets
    `additionalProperties: false`.
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def load_crd(data: str | bytes) -> Any:
    """A CRD document; libyaml's loader parses these 10-25k-line files ~10x faster than
    PyYAML's pure-Python one, with the same safe-load rules."""
    return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def v1_schema(crd_dir: Path, kind_file: str) -> dict[str, Any]:
    crd = load_crd((crd_dir / kind_file).read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    return v1["schema"]["openAPIV3Schema"]


def crd_validator(crd_dir: Path, kind_file: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(v1_schema(crd_dir, kind_file)))


def errors(validator: jsonschema.Draft7Validator, document: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def broken_errors(
    validator: jsonschema.Draft7Validator, document: Any, path: tuple[Any, ...], value: Any
) -> list[str]:
    """The schema's errors for a copy of `document` with `value` at `path` (keys and list
    indexes): how a test shows the check catches a typo or a wrong type."""
    broken = copy.deepcopy(document)
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return errors(validator, broken)


def check_group_rules(cluster: dict[str, Any]) -> None:
    """ValidateRayClusterSpec's rules on the head and worker groups that the CRD schema does
    not express (shared by the RayService's cluster and the RayJobs')."""
    groups = [("head", cluster["headGroupSpec"])] + [
        (g["groupName"], g) for g in cluster["workerGroupSpecs"]
    ]
    assert len({n for n, _ in groups}) == len(groups), "group names must be unique"
    for group_name, group in groups:
        params = group.get("rayStartParams", {})
        pod = group["template"]["spec"]
        assert pod["containers"], group_name
        # rayStartParams resources and the group's `resources` field are exclusive.
        if {"num-cpus", "num-gpus", "memory", "resources"} & set(params):
            assert not group.get("resources"), group_name
        assert "labels" not in params, group_name  # the top-level `labels` field instead
        assert all(isinstance(v, str) for v in params.values()), group_name
        assert "redis-username" not in params and "redis-password" not in params, group_name
        env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
        assert not env.keys() & {"RAY_REDIS_ADDRESS", "REDIS_PASSWORD", "REDIS_USERNAME"}
        # Probes are KubeRay's: it injects Ray's own health checks.
        for container in pod["containers"]:
            assert "livenessProbe" not in container and "readinessProbe" not in container
    # Token auth needs rayVersion set and at least 2.52.0.
    assert cluster["authOptions"]["mode"] == "token"
    assert tuple(int(p) for p in cluster["rayVersion"].split(".")) >= (2, 52, 0)


# The Kubernetes version whose built-in schemas the manifests are checked against.
KUBERNETES_VERSION = "1.32"


def validate_pod_template(template: Any) -> None:
    """A Ray pod's template as a core/v1 PodTemplate, strictly (unknown fields refused): the
    KubeRay CRDs embed an older copy of the pod schema."""
    import kubernetes_validate

    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
         "template": template},
        KUBERNETES_VERSION,
        strict=True,
    )  # fmt: skip
