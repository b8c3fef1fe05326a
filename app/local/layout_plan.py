"""`offers plan`: the member layout `layout: auto` would build here, as a table.

For each ensemble application of a Serve config: every member's runtime and predict cost
(per call and per row, as the manifest recorded them at training), where the planner puts
it and why, and the expected CPU per login of the plan against one deployment per member
(the production layout).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config.app_args import MemberLayout
from app.contract.manifest import Runtime, load_manifest
from app.local.serve_config import ConfiguredApp
from app.serving.member_layout import PlacedMembers, place_members


@dataclass(frozen=True)
class PlanRequest:
    load: float | None = None  # logins/s per supervisor replica; None: the app's layout's
    cores: int | None = None  # cores a fan-out can use; None: the app's layout's, or this host's
    runtime: Runtime | None = None  # None: the app's runtime


def planned_layout(
    app: ConfiguredApp, request: PlanRequest
) -> tuple[MemberLayout, PlacedMembers]:
    """The app's layout as `auto` with the request's overrides, and its plan."""
    changes: dict[str, object] = {"placement": "auto", "groups": None}
    if request.load is not None:
        changes["expected_logins_per_s"] = request.load
    if request.cores is not None:
        changes["max_parallel"] = request.cores
    layout = app.args.layout.model_copy(update=changes)
    version_dir = app.version_dir()
    runtime = request.runtime or app.args.runtime
    placed = place_members(load_manifest(version_dir), layout, version_dir, runtime=runtime)
    assert placed.plan is not None  # auto always plans
    return layout, placed


def render(app: ConfiguredApp, layout: MemberLayout, placed: PlacedMembers) -> str:
    plan = placed.plan
    assert plan is not None
    views = placed.placements()
    inputs = plan.inputs
    rows = inputs.rows_per_login * plan.logins_per_call
    lines = [
        f"{app.name} ({app.args.game} {app.args.version}, profile {app.args.profile}): "
        f"layout in the config: {app.args.layout.placement}"
        + ("" if app.args.layout.placement == "auto" else " (below: what `auto` would build)"),
        f"  planned for {inputs.logins_per_s:g} logins/s per supervisor replica "
        f"({plan.logins_per_call:.2f} logins and {rows:.0f} "
        f"rows per fan-out), hop {inputs.hop_cpu_ms:g} CPU-ms, fan-out target "
        f"{inputs.fanout_target_ms:g} ms, {inputs.max_parallel} cores a fan-out can use, "
        f"dedicated at {inputs.dedicated_share:.0%} of the compute",
        f"  runtime {placed.runtime}; costs from {placed.costs_from}",
        "",
        "| member | runtime | ms per call (fixed) | µs per row | ms per fan-out | ms per login "
        "| share | placement | deployment | why |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    costs = {c.name: c for c in plan.costs}
    for m in plan.members:
        cost = costs[m.name]
        lines.append(
            f"| {m.name} | {views[m.name]['runtime']} | {cost.call_ms:.3f} "
            f"| {cost.row_ms * 1000:.1f} | {m.call_ms:.3f} "
            f"| {m.per_login_ms:.3f} | {m.share:.0%} | {m.placement} | {m.deployment or '-'} "
            f"| {m.reason} |"
        )
    per_member = plan.per_member_cpu_ms_per_login()
    planned = plan.cpu_ms_per_login()
    lines += [
        "",
        f"  expected CPU per login (predicts + hops): this plan {planned:.2f} ms, one "
        f"deployment per member {per_member:.2f} ms ({planned / per_member:.2f}x)",
        f"  member deployments: {len(plan.deployments())} "
        f"({', '.join(plan.deployments()) or 'none: every member inline'}); estimated "
        f"fan-out {plan.fanout_ms():.2f} ms",
    ]
    return "\n".join(lines)
