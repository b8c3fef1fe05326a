"""Where each member of an ensemble is scored: the cost-aware layout planner.

A Serve hop (a handle call to another deployment) costs CPU on both ends, whatever the work
it carries. For a member whose predict costs a fraction of that, the hop is most of the
member's cost. So each member gets the placement its cost justifies:

- inline: scored inside the supervisor replica, on its predict thread. No hop.
- grouped: in a member deployment shared with other members. One hop per fan-out for all
  of them, and their predicts run in parallel with the supervisor's.
- dedicated: its own deployment, replicas and autoscaling (the production layout's shape
  for every member). For a member that dominates the ensemble's compute, so it scales on
  its own.

Rules, in order:
1. A member holding at least `dedicated_share` of the ensemble's predict cost per fan-out,
   and costing more than a hop, is dedicated.
2. The other members fill the supervisor first, largest first, as long as its serial
   predict time per fan-out stays within the fan-out target (the most any one process may
   spend in series for one fan-out).
3. What does not fit goes to member groups, packed the same way (first fit, largest
   first); a new group only when no group has room. The number of places a fan-out
   spreads over is at most `max_parallel` (the cores one login's fan-out can use at once):
   beyond that, a new process runs nothing in parallel, it only adds a hop. The fan-out
   target grows to total / max_parallel when the ensemble cannot fit otherwise.

This module is plain arithmetic over measured costs; measuring them is
app.adapters.predict_cost, and turning a plan into deployments is app.serving.member_layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.contract.deployments import dedicated_deployment, group_deployment

Placement = Literal["inline", "grouped", "dedicated"]

INLINE = "inline"


@dataclass(frozen=True)
class MemberCost:
    """One member's predict cost on this machine: a fixed part per call and a part per row."""

    name: str
    call_ms: float
    row_ms: float

    def predict_ms(self, rows: float) -> float:
        return self.call_ms + self.row_ms * rows


@dataclass(frozen=True)
class PlanInputs:
    # CPU one Serve handle call costs, caller and callee together (loadtest.hop_cost).
    hop_cpu_ms: float
    # Candidate rows one login scores (one per catalog offer).
    rows_per_login: int
    # Expected logins/s per supervisor replica: sets how many logins one coalesced fan-out
    # carries, so the rows per predict call.
    logins_per_s: float
    # The most one process may spend in series on the predicts of one fan-out.
    fanout_target_ms: float
    # Cores one fan-out can use at once (processes beyond that run nothing in parallel).
    max_parallel: int
    # Share of the predict cost per fan-out above which a member gets its own deployment.
    dedicated_share: float

    def __post_init__(self) -> None:
        if self.hop_cpu_ms < 0 or self.rows_per_login < 1 or self.logins_per_s < 0:
            raise ValueError(f"impossible plan inputs: {self}")
        if self.fanout_target_ms <= 0 or self.max_parallel < 1:
            raise ValueError(f"impossible plan inputs: {self}")
        if not 0 < self.dedicated_share <= 1:
            raise ValueError(f"dedicated_share must be in (0, 1], got {self.dedicated_share}")


@dataclass(frozen=True)
class MemberPlacement:
    name: str
    placement: Placement
    # The member deployment that scores it; None when inline.
    deployment: str | None
    # Predict cost per fan-out at the expected load, and per login.
    call_ms: float
    per_login_ms: float
    share: float  # of the ensemble's predict cost per fan-out
    reason: str


@dataclass(frozen=True)
class LayoutPlan:
    inputs: PlanInputs
    costs: tuple[MemberCost, ...]  # what it was planned from, in the members' order
    members: tuple[MemberPlacement, ...]
    logins_per_call: float  # logins one coalesced fan-out carries at the expected load
    # Serial predict time per fan-out of each place (inline first), at the expected load.
    place_ms: dict[str, float] = field(default_factory=dict)

    def inline(self) -> list[str]:
        return [m.name for m in self.members if m.placement == "inline"]

    def deployments(self) -> dict[str, list[str]]:
        """Member deployment -> its members, in the order the plan lists them."""
        out: dict[str, list[str]] = {}
        for m in self.members:
            if m.deployment is not None:
                out.setdefault(m.deployment, []).append(m.name)
        return out

    def cpu_ms_per_login(self) -> float:
        """Predicts plus one hop per member deployment per fan-out, per login."""
        predict = sum(m.per_login_ms for m in self.members)
        return predict + self.inputs.hop_cpu_ms * len(self.deployments()) / self.logins_per_call

    def per_member_cpu_ms_per_login(self) -> float:
        """The same members, one deployment each (the production layout)."""
        predict = sum(m.per_login_ms for m in self.members)
        return predict + self.inputs.hop_cpu_ms * len(self.members) / self.logins_per_call

    def fanout_ms(self) -> float:
        """Estimated fan-out time: the slowest place, a member deployment's with its hop."""
        inline = self.place_ms.get(INLINE, 0.0)
        remote = [ms + self.inputs.hop_cpu_ms for p, ms in self.place_ms.items() if p != INLINE]
        return max([inline, *remote])


MAX_LOGINS_PER_CALL = 1024.0


def logins_per_call(costs: Sequence[MemberCost], inputs: PlanInputs) -> float:
    """Logins one coalesced fan-out carries: those arriving while the previous one runs.

    The serial time of a fan-out of k logins is A + B k (A: the calls' fixed costs, B: one
    login's rows), so k = rate x (A + B k) settles at rate A / (1 - rate B), at least 1. When
    the predicts cannot keep up with the rate at all (rate B >= 1), every fan-out grows to
    what one call holds.
    """
    rate = inputs.logins_per_s / 1000.0  # per ms
    fixed = sum(c.call_ms for c in costs)
    per_login = sum(c.row_ms for c in costs) * inputs.rows_per_login
    if rate * per_login >= 1.0:
        return MAX_LOGINS_PER_CALL
    return min(max(1.0, rate * fixed / (1.0 - rate * per_login)), MAX_LOGINS_PER_CALL)


def plan_layout(costs: Sequence[MemberCost], inputs: PlanInputs) -> LayoutPlan:
    """The placement of every member (see the module's rules). Members keep their given
    order in the plan; the decisions never depend on it except to break exact ties."""
    if not costs:
        raise ValueError("an ensemble needs at least one member")
    names = [c.name for c in costs]
    if len(set(names)) != len(names):
        raise ValueError(f"member names repeat: {names}")
    k = logins_per_call(costs, inputs)
    rows = inputs.rows_per_login * k
    call = {c.name: c.predict_ms(rows) for c in costs}
    total = sum(call.values())
    share = {n: (call[n] / total if total > 0 else 1.0 / len(costs)) for n in names}

    placement: dict[str, tuple[Placement, str | None, str]] = {}
    for n in names:
        if share[n] >= inputs.dedicated_share and call[n] > inputs.hop_cpu_ms:
            placement[n] = (
                "dedicated",
                dedicated_deployment(n),
                f"{share[n]:.0%} of the predict cost (>= {inputs.dedicated_share:.0%}) and "
                f"{call[n]:.2f} ms a call, more than a hop ({inputs.hop_cpu_ms:.2f} ms): "
                "scales on its own",
            )
    rest = sorted((n for n in names if n not in placement), key=lambda n: (-call[n], n))
    places = 1 + len(placement)  # the supervisor and each dedicated member
    target = max(
        inputs.fanout_target_ms,
        sum(call[n] for n in rest) / max(1, inputs.max_parallel - len(placement)),
    )
    loads: dict[str, float] = {INLINE: 0.0}
    loads.update({p[1]: call[n] for n, p in placement.items() if p[1] is not None})
    groups: list[str] = []
    for n in rest:
        fits = [p for p in [INLINE, *groups] if loads[p] + call[n] <= target + 1e-9]
        if fits:
            where = fits[0]
        elif places < inputs.max_parallel:
            where = group_deployment(len(groups))
            groups.append(where)
            loads[where] = 0.0
            places += 1
        else:  # every core already has a place: the least loaded one takes it
            where = min([INLINE, *groups], key=lambda p: (loads[p], p))
        loads[where] += call[n]
        if where == INLINE:
            placement[n] = (
                "inline",
                None,
                f"{call[n]:.2f} ms a call; the supervisor's predicts stay within "
                f"{target:.1f} ms a fan-out",
            )
        else:
            placement[n] = (
                "grouped",
                where,
                f"{call[n]:.2f} ms a call does not fit the supervisor's {target:.1f} ms; "
                "scored in parallel with it",
            )
    members = tuple(
        MemberPlacement(
            name=n,
            placement=placement[n][0],
            deployment=placement[n][1],
            call_ms=call[n],
            per_login_ms=call[n] / k,
            share=share[n],
            reason=placement[n][2],
        )
        for n in names
    )
    return LayoutPlan(
        inputs=inputs, costs=tuple(costs), members=members, logins_per_call=k, place_ms=loads
    )
