"""How many replicas a deployment needs, from its replicas' utilization (app.core.load_meter).

The work a deployment does is the sum of its replicas' utilizations (in replicas' worth of
capacity); the replicas it needs is that work over the utilization it should run at. This is
independent of how many requests carried the work, so it keeps tracking load when the
supervisor coalesces logins into a fixed number of fan-outs. Serve applies the deployment's
bounds (min/max_replicas), up/down delays and scaling factors on top (its policy wrapper).
"""

from __future__ import annotations

from collections.abc import Iterable


def desired_replicas(utilizations: Iterable[float], target_utilization: float) -> float | None:
    """Replicas that would run the reported work at `target_utilization`; None when no
    replica has reported yet (keep the current target).

    Replicas still starting have not reported: they count as idle, which is what they are.
    """
    if not 0 < target_utilization <= 1:
        raise ValueError("target_utilization must be in (0, 1]")
    samples = [max(0.0, u) for u in utilizations]
    if not samples:
        return None
    return sum(samples) / target_utilization


def capped_by_idle_cpu(
    desired: float, current: float, idle_cpus: float | None, min_idle_cpus: float | None
) -> float:
    """`desired`, except that replicas are never added while the most idle host the
    replicas report from has less than `min_idle_cpus` cores idle.

    A replica added where no core is idle is not capacity: it shares the same cores with the
    replicas already serving, and adds its own event loop, metrics and health checks to
    them. Fewer replicas are always allowed, and an unknown idle CPU (no report yet, or
    `min_idle_cpus` None: a cluster that adds nodes) never holds a decision back.
    """
    if min_idle_cpus is None or idle_cpus is None or desired <= current:
        return desired
    return desired if idle_cpus >= min_idle_cpus else current
