"""The client-cost study measures both ways in every round, interleaved."""

from __future__ import annotations

import pytest

from loadtest import client_cost

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_every_round_measures_each_way_once_in_order(monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(
        client_cost,
        "WAYS",
        {"a": lambda: made.append("a"), "b": lambda: made.append("b")},
    )
    results = client_cost.measure(rounds=3, clients=2)
    assert made == ["a", "b"] + ["a", "a", "b", "b"] * 3  # warm-up, then interleaved rounds
    assert {way: len(values) for way, values in results.items()} == {"a": 3, "b": 3}
    assert all(v >= 0 for values in results.values() for v in values)


def test_the_real_ways_make_working_clients():
    for make in client_cost.WAYS.values():
        assert make().meta.service_model.service_name == "dynamodb"
