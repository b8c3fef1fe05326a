"""Member layout: which members share a deployment."""

from __future__ import annotations

import pytest

from app.contract.manifest import MemberEntry
from app.serving.member_layout import MemberLayout, plan_groups
from tests.support import member

pytestmark = pytest.mark.unit


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
