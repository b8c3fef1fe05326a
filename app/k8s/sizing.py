"""Does the worker group hold every deployment the Serve config can scale to?

Ray schedules a replica only where its `num_cpus` and `memory` fit, and the autoscaler only
adds nodes up to the group's maxReplicas. So the group must cover every deployment at
`max_replicas x (num_cpus, memory)` with the profile's headroom, and at `min_replicas`
without waiting for a new node. Deployments are counted as the builder creates them: one
per member in the production layout (names from the training recipe, so no artifacts are
needed to render), plus the supervisor, plus each game's router.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.config.app_args import DeploymentArgs, EnsembleAppArgs, MemberLayout
from app.config.router_args import RouterAppArgs
from app.config.serve_document import BUILDER_IMPORT_PATH
from app.contract import deployments
from app.contract.deployments import dedicated_deployment, group_deployment
from app.k8s.profile import WorkerGroupProfile
from models import recipes

GIB_IN_MB = 1024.0


class SizingError(ValueError):
    """The worker group cannot host what the Serve config asks for."""


@dataclass(frozen=True)
class Demand:
    application: str
    deployment: str
    sizing: DeploymentArgs

    @property
    def label(self) -> str:
        return f"{self.application}/{self.deployment}"


@dataclass(frozen=True)
class ClusterDemand:
    cpus_at_max: float
    memory_gib_at_max: float
    cpus_at_min: float
    memory_gib_at_min: float


def member_deployments(args: EnsembleAppArgs) -> list[str]:
    """Names of the member deployments the builder creates for these args."""
    names = recipes.profile(args.profile).member_names()
    return _layout_names(names, args.layout)


def _layout_names(members: list[str], layout: MemberLayout) -> list[str]:
    # `auto` is planned on the cluster from measured costs: size for the most deployments
    # any plan can create, one per member.
    if layout.groups is None:
        return [dedicated_deployment(name) for name in members]
    return [group_deployment(g) for g in range(min(layout.groups, len(members)))]


def demands(serve_config: dict[str, Any]) -> list[Demand]:
    found: list[Demand] = []
    for app in serve_config["applications"]:
        name = app["name"]
        if app["import_path"] == BUILDER_IMPORT_PATH:
            args = EnsembleAppArgs.model_validate(app["args"])
            found.append(Demand(name, deployments.SUPERVISOR, args.supervisor))
            for deployment in member_deployments(args):
                changes = args.member_deployments.get(deployment, {})
                found.append(Demand(name, deployment, args.members.updated(changes)))
            unknown = set(args.member_deployments) - set(member_deployments(args))
            if unknown:
                raise SizingError(
                    f"{name}: member_deployments names {sorted(unknown)}, "
                    "which the layout does not create"
                )
        else:
            router = RouterAppArgs.model_validate(app["args"])
            found.append(Demand(name, deployments.ROUTER, router.router))
    return found


def check_worker_group(
    found: list[Demand], group: WorkerGroupProfile, headroom: float
) -> ClusterDemand:
    """The totals, or SizingError naming every rule the group breaks."""
    problems: list[str] = []
    schedulable_gib = group.schedulable_memory_gib()
    for d in found:
        if d.sizing.memory_mb is None:
            problems.append(
                f"{d.label}: no memory_mb; on a cluster every replica reserves memory, or Ray "
                "packs replicas onto a node until it runs out"
            )
            continue
        if d.sizing.num_cpus > group.cpu or d.sizing.memory_mb / GIB_IN_MB > schedulable_gib:
            problems.append(f"{d.label}: one replica does not fit on one worker pod")
        per_node = d.sizing.max_replicas_per_node
        if per_node is not None:
            nodes_needed = math.ceil(d.sizing.autoscaling.max_replicas / per_node)
            if nodes_needed > group.max_replicas:
                problems.append(
                    f"{d.label}: max_replicas {d.sizing.autoscaling.max_replicas} at "
                    f"{per_node} per node needs {nodes_needed} nodes; the group has at most "
                    f"{group.max_replicas}"
                )
            if math.ceil(d.sizing.autoscaling.min_replicas / per_node) > max(group.min_replicas, 1):
                problems.append(
                    f"{d.label}: min_replicas needs more nodes than workers.min_replicas"
                )
    if problems:
        raise SizingError("; ".join(problems))
    total = ClusterDemand(
        cpus_at_max=sum(d.sizing.num_cpus * d.sizing.autoscaling.max_replicas for d in found),
        memory_gib_at_max=sum(_gib(d) * d.sizing.autoscaling.max_replicas for d in found),
        cpus_at_min=sum(d.sizing.num_cpus * d.sizing.autoscaling.min_replicas for d in found),
        memory_gib_at_min=sum(_gib(d) * d.sizing.autoscaling.min_replicas for d in found),
    )
    capacity = (group.cpu * group.max_replicas, schedulable_gib * group.max_replicas)
    if total.cpus_at_max * headroom > capacity[0]:
        problems.append(
            f"CPU: the deployments reserve {total.cpus_at_max:g} at max_replicas, x{headroom:g} "
            f"headroom = {total.cpus_at_max * headroom:g}; {group.max_replicas} workers x "
            f"{group.cpu:g} = {capacity[0]:g}"
        )
    if total.memory_gib_at_max * headroom > capacity[1]:
        problems.append(
            f"memory: the deployments reserve {total.memory_gib_at_max:.1f} GiB at max_replicas, "
            f"x{headroom:g} headroom = {total.memory_gib_at_max * headroom:.1f} GiB; "
            f"{group.max_replicas} workers x {schedulable_gib:g} GiB schedulable = {capacity[1]:g}"
        )
    # The minimum layout must start without the autoscaler: the service is up as soon as
    # the group's minimum nodes are.
    if total.cpus_at_min > group.cpu * group.min_replicas:
        problems.append(
            f"CPU at min_replicas: {total.cpus_at_min:g} > {group.min_replicas} workers x "
            f"{group.cpu:g}"
        )
    if total.memory_gib_at_min > schedulable_gib * group.min_replicas:
        problems.append(
            f"memory at min_replicas: {total.memory_gib_at_min:.1f} GiB > {group.min_replicas} "
            f"workers x {schedulable_gib:g} GiB"
        )
    if problems:
        raise SizingError("; ".join(problems))
    return total


def _gib(d: Demand) -> float:
    assert d.sizing.memory_mb is not None  # checked first
    return d.sizing.memory_mb / GIB_IN_MB
