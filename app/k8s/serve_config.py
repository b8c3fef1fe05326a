"""The production Serve config (the RayService's serveConfigV2) from serve_config.yaml.

The applications stay the local config's, in the same order, with only these overrides
(the profile's `serve` section; README, Deploy to Kubernetes):

- `proxy_location` and `http_options.host`: Serve's HAProxy on every node, listening on the
  pod's interfaces, so the Serve service (and HAProxy on one node reaching replicas on
  another) works across pods;
- `logging_config.encoding` (JSON, for the cluster's log shipper);
- every ensemble application's `runtime_env.env_vars`: the local DynamoDB endpoint (dynalite),
  the local S3 endpoint (the local model store), the node cache folder (the pods set it) and
  every AWS_* variable are dropped (credentials come from IRSA), the table and region
  are the profile's, and OFFERS_BATCH_OUTPUT_URI is the batch jobs' output (`batch.output_uri`:
  the supervisors load their version's newest snapshot from there); an API key digest there
  is refused (the cluster mounts it);
- every ensemble application's `args` deep-merged with `serve.ensemble_args` (the
  production member layout and sizing), every router's with `serve.router_args`;
- every ensemble application's `args.artifacts` is the profile's model store
  (`model_store.uri`), and `args.artifacts_root` is dropped: the image holds no model, so
  the cluster loads every version from the store, whatever the local config loads from.
"""

from __future__ import annotations

import copy
from typing import Any

from app.config.app_args import EnsembleAppArgs
from app.config.knobs import deep_merge
from app.config.router_args import RouterAppArgs
from app.config.serve_document import BUILDER_IMPORT_PATH, ROUTER_IMPORT_PATH
from app.k8s.profile import ProductionProfile

# Only meaningful against the local servers (dynalite, the local S3-protocol model store):
# never shipped to a cluster. Every AWS_* variable goes too: on the cluster, credentials come
# from IRSA alone.
LOCAL_ONLY_ENV = frozenset({"OFFERS_DYNAMODB_ENDPOINT_URL", "OFFERS_S3_ENDPOINT_URL"})
# Set on the Ray pods instead (app.k8s.rayservice): the node cache is the pod's volume, and an
# application's value would point its replicas somewhere else.
POD_ENV = frozenset({"OFFERS_MODEL_CACHE_DIR"})
# The cluster mounts the digest from a Secret (OFFERS_API_KEY_SHA256_FILE); a digest in the
# config as well would make every replica refuse to start ("not both").
REFUSED_ENV = frozenset({"OFFERS_API_KEY_SHA256", "OFFERS_API_KEY_SHA256_FILE"})


class ProductionConfigError(ValueError):
    """The local config cannot be turned into a production one as the profile asks."""


def production_serve_config(local: dict[str, Any], profile: ProductionProfile) -> dict[str, Any]:
    """serveConfigV2 as a document: the local config with the production overrides."""
    config = copy.deepcopy(local)
    overrides = profile.serve
    config["proxy_location"] = overrides.proxy_location
    config["http_options"] = {**config.get("http_options", {}), "host": overrides.http_host}
    config["logging_config"] = {
        **config.get("logging_config", {}),
        "encoding": overrides.log_encoding,
    }
    apps = config.get("applications") or []
    if not apps:
        raise ProductionConfigError("the local config has no applications")
    for app in apps:
        kind = app.get("import_path")
        if kind == BUILDER_IMPORT_PATH:
            app["args"] = _validated_ensemble_args(app, overrides.ensemble_args, profile)
            app["runtime_env"] = _production_runtime_env(app.get("runtime_env") or {}, profile)
        elif kind == ROUTER_IMPORT_PATH:
            merged = deep_merge(app.get("args") or {}, overrides.router_args)
            _validate(RouterAppArgs, app["name"], merged)
            app["args"] = merged
        else:
            raise ProductionConfigError(
                f"{app.get('name')}: import_path {kind!r} is neither the ensemble builder nor "
                "the router; the generator does not know its production overrides"
            )
    return config


def _validated_ensemble_args(
    app: dict[str, Any], overrides: dict[str, Any], profile: ProductionProfile
) -> dict[str, Any]:
    merged = deep_merge(app.get("args") or {}, overrides)
    # The store, not a refusal, for an application that loads from a folder (artifacts_root,
    # or no `artifacts`): that folder is in this checkout, the image holds no model, and a
    # version is released by publishing it (docs/kubernetes.md). A version not published
    # there fails its application's build on the cluster, naming the store URI it looked at.
    merged.pop("artifacts_root", None)
    merged["artifacts"] = profile.model_store.uri
    _validate(EnsembleAppArgs, app["name"], merged)
    return merged


def _validate(model: Any, name: str, args: dict[str, Any]) -> Any:
    try:
        return model.model_validate(args)
    except ValueError as exc:
        raise ProductionConfigError(f"{name}: args with the production overrides: {exc}") from exc


def _production_runtime_env(
    runtime_env: dict[str, Any], profile: ProductionProfile
) -> dict[str, Any]:
    local = runtime_env.get("env_vars") or {}
    refused = sorted(REFUSED_ENV & set(local))
    if refused:
        raise ProductionConfigError(
            f"runtime_env sets {refused}: on the cluster the API key digest comes from the "
            "mounted Secret only"
        )
    dropped = LOCAL_ONLY_ENV | POD_ENV
    env = {k: v for k, v in local.items() if k not in dropped and not k.startswith("AWS_")}
    env["OFFERS_DYNAMODB_TABLE"] = profile.dynamodb.table
    env["OFFERS_AWS_REGION"] = profile.aws.region
    env["OFFERS_BATCH_OUTPUT_URI"] = profile.batch.output_uri
    return {**runtime_env, "env_vars": env}
