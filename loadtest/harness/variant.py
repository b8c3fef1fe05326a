"""A configuration variant: the shipped Serve config with some settings rewritten.

A study (the bench's ablation, loadtest/bench/variants.py) names its variants; the harness
applies one to the Serve config it derives (systems.derived_serve_config) and to the
environment `serve run` starts Ray with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.ray_env import ray_node_env

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
    # Ray / Serve process settings laid over ray_node_env(); None removes a setting.
    ray_env: dict[str, str | None] = field(default_factory=dict)
    # True: clients call the supervisor replica's own HTTP port (Serve's direct ingress)
    # instead of the documented ingress on http_options.port.
    direct_ingress: bool = False
    # False: Serve's HAProxy as Serve configures it, without the edge's admission (app.edge).
    edge: bool = True


def ray_env(variant: Variant | None, edge: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `serve run` starts Ray with for this variant (None: as shipped), with
    the config's edge settings (serve_config.edge_env) unless the variant turns them off."""
    env = ray_node_env()
    if edge and (variant is None or variant.edge):
        env.update(edge)
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
