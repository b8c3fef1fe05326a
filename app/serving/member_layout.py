"""Which members share a deployment: the fan-out width of an application.

One member per deployment is the production layout: each member is replicated and autoscaled
on its own. On a small machine every deployment costs a process (~250 MB), a handle call
per request and controller bookkeeping, so a few groups balanced by predict cost serve
faster there; fan-out width then equals the number of groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.config.app_args import MemberLayout
from app.contract.manifest import MemberEntry

# Used for a member whose manifest has no measured predict cost.
DEFAULT_PREDICT_MS = 1.0


@dataclass(frozen=True)
class MemberGroup:
    deployment: str
    members: tuple[MemberEntry, ...]


def predict_cost(entry: MemberEntry) -> float:
    cost = entry.training.get("predict_ms_10_rows")
    return float(cost) if isinstance(cost, int | float) and cost > 0 else DEFAULT_PREDICT_MS


def plan_groups(entries: Sequence[MemberEntry], layout: MemberLayout) -> list[MemberGroup]:
    """Deployments and their members; members keep manifest order inside each group."""
    if layout.groups is None:
        return [MemberGroup(f"member-{e.name}", (e,)) for e in entries]
    n = min(layout.groups, len(entries))
    # Longest-processing-time first: each member goes to the group with the least predict
    # cost so far, so the slowest group (which bounds the fan-out) is as fast as it can be.
    loads = [0.0] * n
    assigned: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(entries)), key=lambda i: -predict_cost(entries[i])):
        g = min(range(n), key=lambda g: (loads[g], g))
        loads[g] += predict_cost(entries[i])
        assigned[g].append(i)
    return [
        MemberGroup(f"member-group-{g}", tuple(entries[i] for i in sorted(assigned[g])))
        for g in range(n)
    ]
