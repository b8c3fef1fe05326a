"""The integration tests' applications, deployed the way `serve deploy` deploys them.

Every application a test deploys is part of one declarative Serve config, applied whole by
Serve's controller (the call the dashboard's REST API makes for `serve deploy`). So a test
that changes only the `user_config` of deployments (live knobs, injected faults) gets the
same replicas reconfigured in place, as an operator would, instead of every replica
replaced: `serve.run` gives each deployment a new random version on every call.
"""

from __future__ import annotations

import time
from typing import Any

BUILD_APP = "app.serving.builder:build_app"
BUILD_ROUTER = "app.serving.builder:build_router"


class DeployFailed(RuntimeError):
    pass


class ServeApps:
    """The applications of one test cluster, by name, as the config that is applied."""

    def __init__(self) -> None:
        self._apps: dict[str, dict[str, Any]] = {}

    def deploy(
        self,
        name: str,
        route_prefix: str,
        import_path: str,
        args: dict[str, Any],
        user_configs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Deploys (or updates) one application and returns once it is RUNNING: new args
        replace its replicas, new `user_configs` (deployment -> user_config) only
        reconfigure them; a deployment left out gets back the user_config of its code.
        An application that fails to deploy is deleted, then DeployFailed raised."""
        self.deploy_many([app_config(name, route_prefix, import_path, args, user_configs)])

    def deploy_many(self, apps: list[dict[str, Any]]) -> None:
        """Several applications (app_config) in one change of the config: they start
        together, and this returns once every one is RUNNING."""
        for app in apps:
            self._apps[app["name"]] = app
        self._apply()
        for app in apps:
            try:
                wait_running(app["name"])
            except DeployFailed:
                self.delete(app["name"])
                raise

    def reconfigure(self, name: str, user_configs: dict[str, dict[str, Any]]) -> None:
        """The same application with these live knobs: no replica is replaced."""
        app = self._apps[name]
        self.deploy(name, app["route_prefix"], app["import_path"], app["args"], user_configs)

    def delete(self, *names: str) -> None:
        """Removes these applications in one change of the config (their replicas stop
        together), then waits for each to be gone."""
        from ray import serve

        removed = [self._apps.pop(name, None) for name in names]
        if any(app is not None for app in removed):
            self._apply()
        for name in names:
            serve.delete(name)

    def _apply(self) -> None:
        from ray.serve.context import _get_global_client
        from ray.serve.schema import ServeDeploySchema

        config = ServeDeploySchema.model_validate({"applications": list(self._apps.values())})
        _get_global_client().deploy_apps(config)


def app_config(
    name: str,
    route_prefix: str,
    import_path: str,
    args: dict[str, Any],
    user_configs: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One application of a Serve config (`user_configs`: deployment -> user_config)."""
    return {
        "name": name,
        "route_prefix": route_prefix,
        "import_path": import_path,
        "args": args,
        "deployments": [
            {"name": deployment, "user_config": config}
            for deployment, config in (user_configs or {}).items()
        ],
    }


# How long an application may take to come up: a setup wait, not a figure any test judges.
# Four applications deployed at once (test_member_placement) took more than 120 s in a slow
# hour of a clean-clone CI run (2026-11-28): their build tasks' workers started after 30 s,
# and each replica's worker ~70 s after it was scheduled, two at a time.
DEPLOY_TIMEOUT_S = 300.0


def wait_running(name: str, timeout_s: float = DEPLOY_TIMEOUT_S) -> None:
    """Until the application is RUNNING after the config just applied (applying it marks the
    application DEPLOYING at once, so a RUNNING read afterwards is the new config's). Reads
    Serve's details as the router does: `serve.status()` parses them at ~0.26 s of CPU a
    read, which this loop took from the replicas it waited for."""
    from app.serving.router import read_serve_details

    deadline = time.monotonic() + timeout_s
    while True:
        app = (read_serve_details().get("applications") or {}).get(name)
        # An enum in the dict (ApplicationStatus, a str), not its value.
        status = getattr(app.get("status"), "value", "") if app is not None else "absent"
        if status == "RUNNING":
            return
        if status == "DEPLOY_FAILED":
            raise DeployFailed(f"{name}: {app.get('message', '') if app else ''}")
        if time.monotonic() > deadline:
            message = app.get("message", "") if app is not None else ""
            raise TimeoutError(f"{name} not RUNNING after {timeout_s:.0f} s ({status}: {message})")
        time.sleep(0.2)
