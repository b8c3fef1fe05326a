"""Reading serve_config.yaml for the local tooling (training, seeding, dynalite)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from app.builder import EnsembleAppArgs
from app.settings import Settings

BUILDER_IMPORT_PATH = "app.builder:build_app"

# Environment for the processes that start Ray and Serve (`serve run`, `ray start`): it
# reaches the controller and proxy, which runtime_env env_vars in the config do not.
# RAY_SERVE_THROUGHPUT_OPTIMIZED: Serve's documented fast-path bundle (user code on the
# replica's event loop, buffered request-path logs, gRPC between proxy and replicas, no
# per-request logs to stderr). Measured in the README's ablation.
SERVE_PROCESS_ENV: dict[str, str] = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}


@dataclass(frozen=True)
class ConfiguredApp:
    name: str
    route_prefix: str
    args: EnsembleAppArgs
    settings: Settings  # the settings its replicas see, from the app's runtime_env env_vars


def configured_apps(path: Path) -> list[ConfiguredApp]:
    """Ensemble applications declared in a Serve config file."""
    document = yaml.safe_load(path.read_text())
    apps = []
    for app in document.get("applications", []):
        if app.get("import_path") != BUILDER_IMPORT_PATH:
            continue
        env = (app.get("runtime_env") or {}).get("env_vars") or {}
        settings = Settings(
            **{k[len("OFFERS_") :].lower(): v for k, v in env.items() if k.startswith("OFFERS_")}
        )
        apps.append(
            ConfiguredApp(
                name=app["name"],
                route_prefix=app.get("route_prefix", "/"),
                args=EnsembleAppArgs.model_validate(app.get("args") or {}),
                settings=settings,
            )
        )
    return apps


def local_endpoint(apps: list[ConfiguredApp]) -> tuple[str, int, str]:
    """(host, port, table) of the one local DynamoDB endpoint the configured apps share."""
    endpoints = {
        (str(a.settings.dynamodb_endpoint_url or ""), a.settings.dynamodb_table) for a in apps
    }
    if len(endpoints) != 1:
        raise ValueError(f"expected one shared DynamoDB endpoint, found {sorted(endpoints)}")
    url, table = endpoints.pop()
    parts = urlsplit(url)
    if parts.hostname not in {"127.0.0.1", "localhost"} or parts.port is None:
        raise ValueError(f"local runs need a loopback DynamoDB endpoint with a port, got {url!r}")
    return parts.hostname, parts.port, table
