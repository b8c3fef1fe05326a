"""Member layout: which members share a deployment."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from app.contract.manifest import MemberEntry
from app.core.planning.member_placement import MemberCost
from app.serving.member_layout import (
    MemberLayout,
    place_members,
    plan_groups,
    possible_deployments,
)
from tests.support import member

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def entry(name: str, cost: float | None) -> MemberEntry:
    return member(name, 1.0, {} if cost is None else {"predict_ms_10_rows": cost})


def test_default_layout_is_one_deployment_per_member():
    entries = [entry("a", 1.0), entry("b", 2.0)]
    groups = plan_groups(entries, MemberLayout())
    assert [(g.deployment, [e.name for e in g.members]) for g in groups] == [
        ("member-a", ["a"]),
        ("member-b", ["b"]),
    ]


def test_groups_balance_predict_cost_and_keep_manifest_order():
    costs = {"a": 8.0, "b": 1.0, "c": 6.0, "d": 2.0, "e": 1.0, "f": None}
    entries = [entry(n, c) for n, c in costs.items()]
    groups = plan_groups(entries, MemberLayout(groups=2))
    assert [g.deployment for g in groups] == ["member-group-0", "member-group-1"]
    names = [[e.name for e in g.members] for g in groups]
    assert sorted(n for g in names for n in g) == sorted(costs)  # each member exactly once
    assert all(g == sorted(g, key=list(costs).index) for g in names)
    loads = [sum(costs[n] or 1.0 for n in g) for g in names]
    assert max(loads) - min(loads) <= 1.0  # 8+1+1 vs 6+2+1 (LPT)


def test_more_groups_than_members_gives_one_member_each():
    groups = plan_groups([entry("a", 1.0), entry("b", 1.0)], MemberLayout(groups=5))
    assert [len(g.members) for g in groups] == [1, 1]


def test_layout_rejects_zero_groups():
    with pytest.raises(ValueError):
        MemberLayout(groups=0)


@pytest.mark.parametrize(
    ("written", "placement", "groups"),
    [
        ("auto", "auto", None),
        ("per_member", "per_member", None),
        ({"groups": 3}, "groups", 3),
        ({"groups": None}, "per_member", None),
        ({"placement": "auto", "expected_logins_per_s": 100}, "auto", None),
    ],
)
def test_layout_forms_in_serve_config(written, placement, groups):
    layout = MemberLayout.model_validate(written)
    assert (layout.placement, layout.groups) == (placement, groups)


@pytest.mark.parametrize(
    "written",
    [{"placement": "auto", "groups": 2}, {"placement": "groups"}, "everywhere", {"grups": 2}],
)
def test_layout_refuses_what_cannot_mean_one_thing(written):
    with pytest.raises(ValueError):
        MemberLayout.model_validate(written)


def manifest_of(names: list[str]):
    return SimpleNamespace(members=[entry(n, 1.0) for n in names], offers=[None] * 10)


def test_auto_places_members_from_the_costs_it_is_given():
    manifest = manifest_of(["cheap-a", "cheap-b", "big"])
    costs = [
        MemberCost("cheap-a", call_ms=0.2, row_ms=0.0),
        MemberCost("cheap-b", call_ms=0.3, row_ms=0.0),
        MemberCost("big", call_ms=4.0, row_ms=0.0),
    ]
    layout = MemberLayout(placement="auto", max_parallel=2, hop_cpu_ms=1.0)
    placed = place_members(manifest, layout, Path("unused"), costs=costs)
    assert [e.name for e in placed.inline] == ["cheap-a", "cheap-b"]
    assert [(g.deployment, [e.name for e in g.members]) for g in placed.groups] == [
        ("member-big", ["big"])
    ]
    view = placed.placements()
    assert view["cheap-a"]["placement"] == "inline" and view["cheap-a"]["deployment"] is None
    assert view["big"]["placement"] == "dedicated"
    assert view["big"]["share"] == pytest.approx(4.0 / 4.5, abs=1e-4)
    assert "scales on its own" in view["big"]["reason"]


def test_explicit_layouts_are_placed_without_measuring():
    manifest = manifest_of(["a", "b", "c"])
    placed = place_members(manifest, MemberLayout(groups=2), Path("unused"))
    assert placed.inline == () and placed.plan is None
    assert {v["placement"] for v in placed.placements().values()} == {"grouped"}
    placed = place_members(manifest, MemberLayout(), Path("unused"))
    assert {v["placement"] for v in placed.placements().values()} == {"dedicated"}


def test_auto_may_name_any_deployment_a_plan_could_make():
    entries = [entry("a", 1.0), entry("b", 1.0)]
    possible = possible_deployments(entries, MemberLayout(placement="auto"))
    assert possible == ["member-a", "member-b", "member-group-0", "member-group-1"]
    assert possible_deployments(entries, MemberLayout(groups=1)) == ["member-group-0"]
