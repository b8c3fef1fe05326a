"""Serve's side of utilization autoscaling: the policy the controller runs for a deployment.

Each supervisor, member and router replica reports `utilization` through
`record_autoscaling_stats` (app.core.load_meter); Serve averages every replica's reports over
`look_back_period_s` and hands them to this policy each control-loop tick. The policy asks for
the replicas that run that work at the target utilization (app.core.planning.replica_scaling);
Serve's wrapper then applies min/max_replicas, the up/down delays and scaling factors.
Configured per deployment by app.config.app_args.AutoscalingArgs (`signal: utilization`). With
`min_idle_cpus`, it never adds a replica while no replica's host has that much CPU idle: on a
fixed-size node a replica without a core of its own takes CPU from the ones serving
(app.core.planning.replica_scaling)."""

from __future__ import annotations

from typing import Any

from ray.serve.config import AutoscalingContext

from app.adapters.host_cpu import IdleCpu
from app.core.load_meter import LoadMeter
from app.core.planning.replica_scaling import capped_by_idle_cpu, desired_replicas

UTILIZATION_METRIC = "utilization"
# Cores idle on the replica's host (app.adapters.host_cpu), for min_idle_cpus.
IDLE_CPUS_METRIC = "idle_cpus"


def replica_stats(load: LoadMeter, idle: IdleCpu) -> dict[str, float]:
    """What a replica reports from record_autoscaling_stats: its utilization and, when
    known, the cores idle on its host since its previous report."""
    stats = {UTILIZATION_METRIC: load.utilization()}
    cores = idle.cores()
    if cores is not None:
        stats[IDLE_CPUS_METRIC] = cores
    return stats


class UtilizationPolicy:
    """Instantiated once per deployment by Serve's controller, with `policy_kwargs`."""

    def __init__(
        self, target_utilization: float = 0.6, min_idle_cpus: float | None = None
    ) -> None:
        self.target_utilization = target_utilization
        self.min_idle_cpus = min_idle_cpus

    def __call__(self, ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
        metrics = ctx.aggregated_metrics or {}
        # Only the replicas running now: a stopped replica's last reports would still count.
        running = set(ctx.running_replicas)
        samples = [u for r, u in metrics.get(UTILIZATION_METRIC, {}).items() if r in running]
        desired = desired_replicas(samples, self.target_utilization)
        if desired is None:  # nothing reported yet: hold
            return ctx.target_num_replicas, {}
        idle = [c for r, c in metrics.get(IDLE_CPUS_METRIC, {}).items() if r in running]
        return capped_by_idle_cpu(
            desired, ctx.target_num_replicas, max(idle, default=None), self.min_idle_cpus
        ), {}
