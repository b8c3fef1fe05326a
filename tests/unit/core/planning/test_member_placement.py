"""The layout planner's decisions on controlled costs (app.core.planning.member_placement)."""

from __future__ import annotations

import itertools

import pytest

from app.core.planning.member_placement import MemberCost, PlanInputs, logins_per_call, plan_layout

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def inputs(**changes) -> PlanInputs:
    base = {
        "hop_cpu_ms": 2.0,
        "rows_per_login": 10,
        "logins_per_s": 0.0,  # c=1: one login per fan-out
        "fanout_target_ms": 10.0,
        "max_parallel": 2,
        "dedicated_share": 0.4,
    }
    return PlanInputs(**(base | changes))


def cheap(name: str, ms: float = 0.2) -> MemberCost:
    return MemberCost(name, call_ms=ms, row_ms=0.0)


def placements(plan) -> dict[str, tuple[str, str | None]]:
    return {m.name: (m.placement, m.deployment) for m in plan.members}


def test_cheap_members_are_all_scored_inline_without_a_hop():
    plan = plan_layout([cheap(f"m{i}") for i in range(12)], inputs())
    assert plan.inline() == [f"m{i}" for i in range(12)]
    assert plan.deployments() == {}
    # No hop at all: CPU per login is the predicts alone, 12 hops less than per member.
    assert plan.cpu_ms_per_login() == pytest.approx(12 * 0.2)
    assert plan.per_member_cpu_ms_per_login() == pytest.approx(12 * 0.2 + 12 * 2.0)


def test_a_member_dominating_the_compute_gets_its_own_deployment():
    costs = [cheap(f"m{i}") for i in range(4)] + [cheap("big", 3.0)]
    plan = plan_layout(costs, inputs())
    assert placements(plan)["big"] == ("dedicated", "member-big")
    assert plan.inline() == ["m0", "m1", "m2", "m3"]
    big = next(m for m in plan.members if m.name == "big")
    assert big.share == pytest.approx(3.0 / 3.8)
    assert "scales on its own" in big.reason


def test_a_dominant_member_cheaper_than_a_hop_stays_inline():
    # 60% of the compute, but moving it out would cost more CPU than its predict.
    plan = plan_layout([cheap("a", 0.3), cheap("b", 0.2)], inputs(hop_cpu_ms=2.0))
    assert plan.inline() == ["a", "b"]


def test_members_that_do_not_fit_the_supervisors_serial_budget_run_in_parallel_groups():
    # 8 x 6 ms = 48 ms of predicts, 4 cores: no member dominates (12.5% each); the
    # supervisor takes what fits 12 ms (48 / 4), the rest go to groups of the same size.
    costs = [cheap(f"m{i}", 6.0) for i in range(8)]
    plan = plan_layout(costs, inputs(max_parallel=4, fanout_target_ms=10.0))
    assert len(plan.inline()) == 2
    groups = plan.deployments()
    assert sorted(groups) == ["member-group-0", "member-group-1", "member-group-2"]
    assert all(len(names) == 2 for names in groups.values())
    assert {m.placement for m in plan.members} == {"inline", "grouped"}
    # Every member exactly once.
    placed = plan.inline() + [n for names in groups.values() for n in names]
    assert sorted(placed) == sorted(c.name for c in costs)
    assert plan.fanout_ms() == pytest.approx(12.0 + 2.0)


def test_no_more_places_than_cores_a_fanout_can_use():
    costs = [cheap(f"m{i}", 6.0) for i in range(8)]
    plan = plan_layout(costs, inputs(max_parallel=2, fanout_target_ms=10.0))
    # Two cores: the supervisor and one group, 24 ms each. A third process would run
    # nothing in parallel and only add a hop.
    assert len(plan.deployments()) == 1
    assert plan.place_ms == {"inline": pytest.approx(24.0), "member-group-0": pytest.approx(24.0)}


def test_one_core_keeps_everything_inline():
    costs = [cheap(f"m{i}", 6.0) for i in range(8)]
    plan = plan_layout(costs, inputs(max_parallel=1, dedicated_share=1.0))
    assert plan.inline() == [c.name for c in costs]


def test_load_coalesces_logins_so_fixed_costs_and_hops_are_shared():
    costs = [MemberCost(f"m{i}", call_ms=1.0, row_ms=0.005) for i in range(4)]
    idle = plan_layout(costs, inputs(logins_per_s=0.0))
    busy = plan_layout(costs, inputs(logins_per_s=2000.0))
    assert idle.logins_per_call == 1.0
    # A fan-out of k logins takes 4 ms + 0.2 ms x k; at 2 logins/ms, k = 2 x (4 + 0.2 k).
    k = busy.logins_per_call
    assert k == pytest.approx(2.0 * (4.0 + 0.2 * k))
    assert k == pytest.approx(40.0 / 3.0)
    assert busy.cpu_ms_per_login() < idle.cpu_ms_per_login()


def test_logins_per_call_is_capped_when_predicts_cannot_keep_up():
    costs = [MemberCost("slow", call_ms=0.0, row_ms=1.0)]
    assert logins_per_call(costs, inputs(logins_per_s=1000.0)) == 1024.0


def test_the_plan_never_costs_more_cpu_than_one_deployment_per_member():
    shapes = [
        [cheap(f"m{i}", ms) for i, ms in enumerate((0.1, 0.2, 0.3, 2.2, 0.9))],
        [cheap(f"m{i}", 6.0) for i in range(12)],
        [cheap("solo", 5.0)],
    ]
    for costs, cores, rate in itertools.product(shapes, (1, 2, 8), (0.0, 40.0, 400.0)):
        plan = plan_layout(costs, inputs(max_parallel=cores, logins_per_s=rate))
        assert plan.cpu_ms_per_login() <= plan.per_member_cpu_ms_per_login() + 1e-9
        assert len(plan.deployments()) + 1 <= max(cores, 1) + 1


def test_decisions_do_not_depend_on_the_members_order():
    costs = [cheap("a", 0.1), cheap("b", 2.5), cheap("c", 0.3), cheap("d", 0.9)]
    forward = placements(plan_layout(costs, inputs()))
    backward = placements(plan_layout(list(reversed(costs)), inputs()))
    assert forward == backward
    # Listed in the order given.
    assert [m.name for m in plan_layout(costs, inputs()).members] == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    "bad",
    [
        {"hop_cpu_ms": -1.0},
        {"rows_per_login": 0},
        {"fanout_target_ms": 0.0},
        {"max_parallel": 0},
        {"dedicated_share": 0.0},
        {"dedicated_share": 1.5},
    ],
)
def test_impossible_inputs_are_refused(bad):
    with pytest.raises(ValueError):
        inputs(**bad)


def test_an_empty_or_ambiguous_ensemble_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        plan_layout([], inputs())
    with pytest.raises(ValueError, match="repeat"):
        plan_layout([cheap("a"), cheap("a")], inputs())
