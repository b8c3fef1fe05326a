"""Reading a Serve config file for the local tooling (training, seeding, dynalite, checks)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from app.config.app_args import EnsembleAppArgs
from app.config.edge import EDGE_ENV
from app.config.serve_document import BUILDER_IMPORT_PATH, ROUTER_IMPORT_PATH, edge_config
from app.config.settings import Settings
from app.contract.artifacts import version_dir
from app.contract.manifest import load_manifest
from app.serving.member_layout import possible_deployments

# Re-exported: the local tooling and load tests name them from here.
__all__ = [
    "BUILDER_IMPORT_PATH",
    "ROUTER_IMPORT_PATH",
    "ConfigError",
    "ConfiguredApp",
    "check_deployment_overrides",
    "configured_apps",
    "configured_routers",
    "edge_config",
    "edge_env",
    "from_checkout",
    "local_endpoint",
    "local_store",
]



class ConfigError(ValueError):
    """The Serve config cannot be deployed as written."""


@dataclass(frozen=True)
class ConfiguredApp:
    name: str
    route_prefix: str
    args: EnsembleAppArgs
    settings: Settings  # the settings its replicas see, from the app's runtime_env env_vars
    deployment_overrides: tuple[str, ...]  # names under the app's `deployments:`

    @property
    def artifacts_root(self) -> Path:
        """Where its replicas will look: args first, then their environment's settings."""
        return self.args.artifacts_root or self.settings.artifacts_root

    def version_dir(self) -> Path:
        """Its trained version in this checkout (what `make run` publishes to the store)."""
        return version_dir(
            self.artifacts_root, self.args.profile, self.args.game, self.args.version
        ).resolve()

    @property
    def store_uri(self) -> str | None:
        """The model store its replicas load from (args.artifacts), or None: a folder."""
        return self.args.artifacts


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
                deployment_overrides=tuple(d["name"] for d in app.get("deployments") or []),
            )
        )
    return apps


def configured_routers(path: Path) -> list[tuple[str, str]]:
    """(name, route prefix) of the game routers declared in a Serve config file."""
    document = yaml.safe_load(path.read_text())
    return [
        (app["name"], app.get("route_prefix", "/"))
        for app in document.get("applications", [])
        if app.get("import_path") == ROUTER_IMPORT_PATH
    ]


def check_deployment_overrides(app: ConfiguredApp) -> None:
    """Serve's `deployments:` entries must name deployments the app's layout creates.

    Serve itself only finds out while deploying ("Deployment ... does not exist"); this says
    why before anything starts. Needs the trained manifest (the layout depends on it).
    """
    manifest = load_manifest(app.version_dir())
    created = ["supervisor", *possible_deployments(manifest.members, app.args.layout)]
    unknown = [name for name in app.deployment_overrides if name not in created]
    if unknown:
        raise ConfigError(
            f"{app.name}: `deployments:` names {unknown}, which this layout does not create "
            f"(it can create {created}). Tune member deployments with args.members / "
            "args.member_deployments, which follow the layout."
        )


def local_endpoint(apps: list[ConfiguredApp]) -> tuple[str, int, str]:
    """(host, port, table) of the one local DynamoDB endpoint the configured apps share."""
    endpoints = {
        (str(a.settings.dynamodb_endpoint_url or ""), a.settings.dynamodb_table) for a in apps
    }
    if len(endpoints) != 1:
        raise ConfigError(f"expected one shared DynamoDB endpoint, found {sorted(endpoints)}")
    url, table = endpoints.pop()
    parts = urlsplit(url)
    if parts.hostname not in {"127.0.0.1", "localhost"} or parts.port is None:
        raise ConfigError(f"local runs need a loopback DynamoDB endpoint with a port, got {url!r}")
    return parts.hostname, parts.port, table


def from_checkout(app: dict[str, Any]) -> None:
    """Rewrite one application of a Serve config document (in place) to load its version
    from this checkout's trained folder instead of a model store: for the tools that serve
    another profile of a version (a store holds one build of it) or start clusters of
    their own without the local store (bench, reliability, autoscaling runs). What they
    measure starts once a version is loaded, from the same files either way."""
    (app.get("args") or {}).pop("artifacts", None)
    ((app.get("runtime_env") or {}).get("env_vars") or {}).pop("OFFERS_S3_ENDPOINT_URL", None)


def local_store(apps: list[ConfiguredApp]) -> tuple[str, int] | None:
    """(host, port) of the one local S3-protocol endpoint the apps that load from a model
    store share, or None when every app loads from a folder."""
    from_store = [a for a in apps if a.store_uri]
    if not from_store:
        return None
    endpoints = {str(a.settings.s3_endpoint_url or "") for a in from_store}
    if len(endpoints) != 1:
        raise ConfigError(f"expected one shared S3 endpoint, found {sorted(endpoints)}")
    url = endpoints.pop()
    parts = urlsplit(url)
    if parts.hostname not in {"127.0.0.1", "localhost"} or parts.port is None:
        raise ConfigError(
            f"local runs need OFFERS_S3_ENDPOINT_URL on a loopback address with a port for "
            f"`artifacts: s3://...`, got {url!r}"
        )
    return parts.hostname, parts.port


def edge_env(path: Path) -> dict[str, str]:
    """What the Ray processes need for admission at the edge: Serve starts `offers-haproxy`
    (this venv's, app.edge) as its HAProxy, and it reads the config's limits from OFFERS_EDGE.
    Read when Ray starts: a changed `admission` needs a new cluster, not only `serve deploy`."""
    return {
        "RAY_SERVE_HAPROXY_BINARY_PATH": str(Path(sys.executable).parent / "offers-haproxy"),
        EDGE_ENV: edge_config(yaml.safe_load(path.read_text())).model_dump_json(),
    }
