"""Ensemble configurations for the ablation: each lever of the shipped design taken out alone.

A variant is the shipped configuration (serve_config.yaml, or the production layout) with
one lever switched off, measured in the same rounds as the shipped one: its ratio to the
shipped configuration is what that lever is worth. A variant rewrites the benchmark's
derived Serve config (application args, runtime_env) and the environment `serve run`
starts Ray with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.ray_env import SERVE_PROCESS_ENV

SHIPPED = "shipped"  # serve_config.yaml
PRODUCTION = "production"  # serve_config.production-layout.yaml


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    # Which shipped configuration it starts from; its ratio is taken against that one.
    base: str = SHIPPED
    # Merged into the application's `args` (one level deep for nested models).
    args: dict[str, Any] = field(default_factory=dict)
    # Replica settings (OFFERS_*), set in the application's runtime_env env_vars.
    replica_env: dict[str, str] = field(default_factory=dict)
    # Ray / Serve process settings laid over SERVE_PROCESS_ENV; None removes a setting.
    ray_env: dict[str, str | None] = field(default_factory=dict)
    # True: clients call the supervisor replica's own HTTP port (Serve's direct ingress)
    # instead of the documented ingress on http_options.port.
    direct_ingress: bool = False


_NO_HAPROXY = {
    "RAY_SERVE_ENABLE_HA_PROXY": None,
    "RAY_SERVE_HAPROXY_RETRY_ON": None,
    "RAY_SERVE_HAPROXY_RETRIES": None,
}
_NO_COALESCING = {"coalescing": {"enabled": False}}
_OLD_READS = {"OFFERS_FEATURE_CACHE_TTL_S": "0", "OFFERS_DYNAMODB_BATCH_READS": "false"}

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "python-proxy",
            "Serve's Python proxy on the documented port instead of HAProxy",
            ray_env=_NO_HAPROXY,
        ),
        Variant(
            "grpc-off",
            "handle calls over Ray actor calls instead of gRPC",
            ray_env={"RAY_SERVE_USE_GRPC_BY_DEFAULT": "0"},
        ),
        Variant(
            "no-coalescing",
            "one fan-out per login instead of one per batch of concurrent logins",
            args=_NO_COALESCING,
        ),
        Variant(
            "uncached-reads",
            "no feature cache, one GetItem per login (legacy's read path)",
            replica_env=_OLD_READS,
        ),
        Variant(
            "production-uncoalesced",
            "production layout, one fan-out (12 handle calls) per login",
            base=PRODUCTION,
            args=_NO_COALESCING,
        ),
        Variant(
            "direct-ingress",
            "clients call one supervisor replica's own port (not a production address)",
            direct_ingress=True,
        ),
    )
}


def ray_env(variant: Variant | None) -> dict[str, str]:
    """The environment `serve run` starts Ray with for this variant (None: as shipped)."""
    env = dict(SERVE_PROCESS_ENV)
    for key, value in (variant.ray_env if variant else {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def apply(variant: Variant, app: dict[str, Any]) -> None:
    """Rewrite one application entry of a Serve config in place."""
    args = app.setdefault("args", {})
    for key, value in variant.args.items():
        if isinstance(value, dict) and isinstance(args.get(key), dict):
            args[key] = {**args[key], **value}
        else:
            args[key] = value
    env = app.setdefault("runtime_env", {}).setdefault("env_vars", {})
    env.update(variant.replica_env)
