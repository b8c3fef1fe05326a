"""KubeRay CRD schemas as strict JSON-schema validators (shared by the RayService and RayJob
tests)."""

from __future__ import annotations

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
