"""Ensemble configurations for the ablation: each lever of the fast design switched on in turn.

A variant rewrites the benchmark's derived Serve config (application args, runtime_env) and
the environment `serve run` starts Ray with. Levers are cumulative in the order listed, from
the naive design (one deployment per member, one handle call per member per login) to the
shipped local default (serve_config.yaml as is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.ray_env import SERVE_PROCESS_ENV


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    # Merged into the application's `args` (one level deep for nested models).
    args: dict[str, Any] = field(default_factory=dict)
    # Replica settings (OFFERS_*), set in the application's runtime_env env_vars.
    replica_env: dict[str, str] = field(default_factory=dict)
    # Ray / Serve process settings (controller, proxy), set where `serve run` starts Ray.
    ray_env: dict[str, str] = field(default_factory=dict)
    # True: use serve_config.yaml as shipped, untouched.
    shipped: bool = False
    # True: clients call the supervisor replica's own HTTP port (Serve's direct ingress,
    # on with RAY_SERVE_THROUGHPUT_OPTIMIZED) instead of the proxy on http_options.port.
    direct_ingress: bool = False


_PER_MEMBER = {"layout": {"groups": None}}
_NO_COALESCING = {"coalescing": {"enabled": False}}
_OLD_READS = {"OFFERS_FEATURE_CACHE_TTL_S": "0", "OFFERS_DYNAMODB_BATCH_READS": "false"}

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "naive",
            "one deployment per member, one handle call per member per login, GetItem per login",
            args={**_PER_MEMBER, **_NO_COALESCING},
            replica_env=_OLD_READS,
        ),
        Variant(
            "grouped",
            "+ members in 2 group deployments balanced by predict cost",
            args={"layout": {"groups": 2}, **_NO_COALESCING},
            replica_env=_OLD_READS,
        ),
        Variant(
            "coalesced",
            "+ one fan-out per batch of concurrent logins at the supervisor",
            args={"layout": {"groups": 2}},
            replica_env=_OLD_READS,
        ),
        Variant(
            "feature-reads",
            "+ TTL feature cache and one BatchGetItem per batch of logins",
            args={"layout": {"groups": 2}},
        ),
        Variant(
            "shipped",
            "+ RAY_SERVE_THROUGHPUT_OPTIMIZED=1: serve_config.yaml as shipped",
            shipped=True,
        ),
        Variant(
            "direct-ingress",
            "+ clients call the supervisor replica's HTTP port, no proxy hop",
            shipped=True,
            direct_ingress=True,
        ),
    )
}


def apply(variant: Variant, app: dict[str, Any]) -> dict[str, str]:
    """Rewrite one application entry of a Serve config in place; returns the Ray env."""
    if variant.shipped:
        return dict(SERVE_PROCESS_ENV)
    args = app.setdefault("args", {})
    for key, value in variant.args.items():
        if isinstance(value, dict) and isinstance(args.get(key), dict):
            args[key] = {**args[key], **value}
        else:
            args[key] = value
    if "layout" in variant.args:
        # Member deployment names follow the layout; the shipped per-deployment overrides
        # would name deployments this layout does not have. Members take args.members.
        app["deployments"] = [
            d for d in app.get("deployments", []) if not d["name"].startswith("member-")
        ]
    env = app.setdefault("runtime_env", {}).setdefault("env_vars", {})
    env.update(variant.replica_env)
    return dict(variant.ray_env)
