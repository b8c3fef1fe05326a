"""The names of the Serve deployments the service creates, defined once: the builder makes
them, the member layout plans them, the Kubernetes sizing counts them, and `deployments:`
overrides in a Serve config must use them."""

from __future__ import annotations

SUPERVISOR = "supervisor"  # every ensemble application's ingress
ROUTER = "router"  # every game router application's only deployment
GROUP_PREFIX = "member-group-"  # member-group-<i>: members scored together
DEDICATED_PREFIX = "member-"  # member-<name>: one member on its own


def group_deployment(index: int) -> str:
    return f"{GROUP_PREFIX}{index}"


def dedicated_deployment(member: str) -> str:
    return f"{DEDICATED_PREFIX}{member}"
