"""Which members a supervisor scores itself and which share a member deployment.

`layout` in an application's args picks one of three:
- per_member: one deployment per member (the production layout of the case study), each
  replicated and autoscaled on its own;
- groups: N deployments, members spread over them by the manifest's predict cost;
- auto: the cost-aware plan (app.core.planning.member_placement) from the members' predict costs
  under the application's runtime, as the manifest records them (measured once, at
  training), the hop's cost and the expected load. The same artifacts and config give the
  same plan whatever the building host is doing. A manifest from before costs were
  recorded is measured here and now instead (app.adapters.predict_cost).
  Cheap members are scored inside the supervisor (inline), the ones that do not fit its
  serial budget in member groups, a dominant one in a deployment of its own.

On a small machine every deployment costs a process (~250 MB), a handle call per fan-out
and controller bookkeeping; a member that predicts in a fraction of a millisecond costs
more in its hop than in its model.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.adapters.member_model import MemberModel
from app.adapters.predict_cost import measure_costs
from app.config.app_args import MemberLayout
from app.contract.deployments import GROUP_PREFIX, dedicated_deployment, group_deployment
from app.contract.manifest import Manifest, MemberEntry, Runtime
from app.core.offers import OfferCatalog
from app.core.planning.member_placement import (
    LayoutPlan,
    MemberCost,
    PlanInputs,
    plan_layout,
)

# Used for a member whose manifest has no measured predict cost.
DEFAULT_PREDICT_MS = 1.0


@dataclass(frozen=True)
class MemberGroup:
    deployment: str
    members: tuple[MemberEntry, ...]


@dataclass(frozen=True)
class PlacedMembers:
    """What the builder creates: the members the supervisor scores itself, and the member
    deployments with theirs. `plan` is the planner's reasoning when `layout: auto`."""

    inline: tuple[MemberEntry, ...]
    groups: tuple[MemberGroup, ...]
    plan: LayoutPlan | None = None
    runtime: Runtime = "onnx"
    # Where the plan's costs came from: "manifest" (recorded at training) or "measured".
    costs_from: str | None = None

    def placements(self) -> dict[str, dict[str, str | float | None]]:
        """Member -> where it is scored (and, when planned, its cost and why): the view
        GET /v1/ensemble shows."""
        planned = {m.name: m for m in self.plan.members} if self.plan else {}
        out: dict[str, dict[str, str | float | None]] = {}
        for entry in self.inline:
            out[entry.name] = {"placement": "inline", "deployment": None}
        for group in self.groups:
            kind = "grouped" if group.deployment.startswith(GROUP_PREFIX) else "dedicated"
            for entry in group.members:
                out[entry.name] = {"placement": kind, "deployment": group.deployment}
        by_name = {e.name: e for e in (*self.inline, *(e for g in self.groups for e in g.members))}
        for name, view in out.items():
            view["runtime"] = by_name[name].runtime(self.runtime)
            if name in planned:
                m = planned[name]
                view |= {
                    "predict_ms_per_call": round(m.call_ms, 4),
                    "share": round(m.share, 4),
                    "reason": m.reason,
                }
        return out


def predict_cost(entry: MemberEntry) -> float:
    cost = entry.training.get("predict_ms_10_rows")
    return float(cost) if isinstance(cost, int | float) and cost > 0 else DEFAULT_PREDICT_MS


def plan_groups(entries: Sequence[MemberEntry], layout: MemberLayout) -> list[MemberGroup]:
    """Deployments and their members for per_member and groups layouts; members keep
    manifest order inside each group."""
    if layout.placement == "auto":
        raise ValueError("layout auto is planned from measured costs: use place_members")
    if layout.groups is None:
        return [MemberGroup(dedicated_deployment(e.name), (e,)) for e in entries]
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
        MemberGroup(group_deployment(g), tuple(entries[i] for i in sorted(assigned[g])))
        for g in range(n)
    ]


def possible_deployments(entries: Sequence[MemberEntry], layout: MemberLayout) -> list[str]:
    """Every member deployment name this layout may create: exactly those of an explicit
    layout; for auto, any a plan could pick (one per member, or groups)."""
    if layout.placement != "auto":
        return [g.deployment for g in plan_groups(entries, layout)]
    return [dedicated_deployment(e.name) for e in entries] + [
        group_deployment(g) for g in range(len(entries))
    ]


def plan_inputs(layout: MemberLayout, rows_per_login: int) -> PlanInputs:
    return PlanInputs(
        hop_cpu_ms=layout.hop_cpu_ms,
        rows_per_login=rows_per_login,
        logins_per_s=layout.expected_logins_per_s,
        fanout_target_ms=layout.fanout_target_ms,
        max_parallel=layout.max_parallel or os.cpu_count() or 1,
        dedicated_share=layout.dedicated_share,
    )


def recorded_costs(manifest: Manifest, runtime: Runtime) -> list[MemberCost] | None:
    """Each member's cost under the runtime that will score it, from the manifest; None
    when any member has none recorded (a manifest trained before costs were)."""
    costs = []
    for entry in manifest.members:
        cost = entry.costs.get(entry.runtime(runtime))
        if cost is None:
            return None
        costs.append(MemberCost(entry.name, call_ms=cost.call_ms, row_ms=cost.row_ms))
    return costs


def measured_costs(manifest: Manifest, version_dir: Path) -> list[MemberCost]:
    """Each member's predict cost on this machine, on one login's candidate rows built from
    the schema's defaults (what a supervisor warms up with)."""
    catalog = OfferCatalog(manifest)
    login = catalog.candidates(manifest.feature_schema.encode_record({}))
    models = [MemberModel.load(e, version_dir) for e in manifest.members]
    return measure_costs(models, login)


def place_members(
    manifest: Manifest,
    layout: MemberLayout,
    version_dir: Path,
    costs: Sequence[MemberCost] | None = None,
    runtime: Runtime = "onnx",
) -> PlacedMembers:
    """The placement `layout` asks for. `auto` plans from the given costs, else the
    manifest's for `runtime`, else costs measured here (an older manifest)."""
    entries = manifest.members
    if layout.placement != "auto":
        return PlacedMembers(
            inline=(), groups=tuple(plan_groups(entries, layout)), runtime=runtime
        )
    costs_from = "given"
    if costs is None:
        costs = recorded_costs(manifest, runtime)
        costs_from = "manifest"
    if costs is None:
        costs = measured_costs(manifest, version_dir)
        costs_from = "measured"
    plan = plan_layout(costs, plan_inputs(layout, len(manifest.offers)))
    by_name = {e.name: e for e in entries}
    inline = tuple(by_name[n] for n in plan.inline())
    groups = tuple(
        MemberGroup(deployment, tuple(by_name[n] for n in names))
        for deployment, names in sorted(plan.deployments().items())
    )
    return PlacedMembers(
        inline=inline, groups=groups, plan=plan, runtime=runtime, costs_from=costs_from
    )
