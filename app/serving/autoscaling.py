"""Serve's side of utilization autoscaling: the policy the controller runs for a deployment.

Each supervisor and member replica reports `utilization` through `record_autoscaling_stats`
(app.core.load_meter); Serve averages every replica's reports over `look_back_period_s`
and hands them to this policy each control-loop tick. The policy asks for the replicas that
run that work at the target utilization (app.core.replica_scaling); Serve's wrapper then
applies min/max_replicas, the up/down delays and scaling factors. Configured per deployment
by app.config.app_args.AutoscalingArgs (`signal: utilization`).
"""

from __future__ import annotations

from typing import Any

from ray.serve.config import AutoscalingContext

from app.core.replica_scaling import desired_replicas

UTILIZATION_METRIC = "utilization"


class UtilizationPolicy:
    """Instantiated once per deployment by Serve's controller, with `policy_kwargs`."""

    def __init__(self, target_utilization: float = 0.6) -> None:
        self.target_utilization = target_utilization

    def __call__(self, ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
        reports = (ctx.aggregated_metrics or {}).get(UTILIZATION_METRIC, {})
        # Only the replicas running now: a stopped replica's last reports would still count.
        running = set(ctx.running_replicas)
        samples = [u for replica, u in reports.items() if replica in running]
        desired = desired_replicas(samples, self.target_utilization)
        if desired is None:  # nothing reported yet: hold
            return ctx.target_num_replicas, {}
        return desired, {}
