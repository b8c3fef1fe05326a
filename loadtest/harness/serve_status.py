"""Serve's applications as `serve status` shows them, read from the dashboard's REST API.

The `serve status` CLI reads the same endpoint, but each call is a new Python process that
imports Ray: ~4 CPU-s on this 2-core host, at the caller's priority. Polled every few
seconds while a config deploys, it held about one core away from the replicas it waited for
(niceness 19). A request here costs milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

import requests

from app.local.ray_auth import auth_header

RUNNING, DEPLOY_FAILED = "RUNNING", "DEPLOY_FAILED"


class DeployFailed(RuntimeError):
    pass


def applications(dashboard: str, timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
    """name -> the application's details (`status`, `message`, `deployments`, ...)."""
    response = requests.get(
        f"{dashboard}/api/serve/applications/", headers=auth_header(), timeout=timeout_s
    )
    response.raise_for_status()
    return response.json().get("applications") or {}


def statuses(dashboard: str) -> dict[str, tuple[str, str]]:
    """name -> (status, message) of every application, as `serve status` lists them."""
    return {
        name: (app.get("status", ""), app.get("message", ""))
        for name, app in applications(dashboard).items()
    }


def wait_running(
    dashboard: str, names: list[str], timeout_s: float = 600, poll_s: float = 1.0
) -> None:
    """Returns once every named application is RUNNING. DeployFailed at the first that
    failed (its message), TimeoutError with their states after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = statuses(dashboard)
        except requests.RequestException:  # the dashboard restarting, or not up yet
            found = {}
        states = {name: found.get(name, ("absent", ""))[0] for name in names}
        failed = {name: found[name][1] for name in names if states[name] == DEPLOY_FAILED}
        if failed:
            raise DeployFailed(f"deploy failed: {failed}")
        if all(state == RUNNING for state in states.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not RUNNING after {timeout_s:.0f} s: {states}")
        time.sleep(poll_s)
