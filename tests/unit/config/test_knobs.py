"""Live knobs: partial changes merge over the args' baseline; bad ones are refused."""

import pytest
from pydantic import ValidationError

from app.config.app_args import EnsembleAppArgs
from app.config.knobs import RouterKnobs, explain

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

TRAINED = {"xgb-all": 2.0, "logreg-all": 1.0}
BASELINE = EnsembleAppArgs.model_validate({"game": "galaxy-raiders", "version": "2026-11"}).knobs()


def test_a_partial_change_keeps_every_other_baseline_value():
    knobs = BASELINE.merged({"quorum": 0.8, "coalescing": {"max_in_flight": 4}})
    assert knobs.quorum == 0.8
    assert knobs.coalescing.max_in_flight == 4
    assert knobs.coalescing.max_rows == BASELINE.coalescing.max_rows
    assert knobs.request_budget_ms == BASELINE.request_budget_ms
    assert BASELINE.merged({}) is BASELINE


def test_member_weights_replace_the_overrides_and_can_weight_a_member_out():
    knobs = BASELINE.merged({"member_weights": {"logreg-all": 0}}).checked(TRAINED, 1024)
    assert knobs.weights(TRAINED) == {"xgb-all": 2.0, "logreg-all": 0.0}
    assert BASELINE.merged({"member_weights": {}}).weights(TRAINED) == TRAINED


def test_injected_delays_are_live_and_a_change_replaces_them_whole():
    slowed = BASELINE.merged({"faults": {"slow_members_ms": {"xgb-all": 3000}}}).checked(
        TRAINED, 1024
    )
    assert slowed.faults.slow_members_ms == {"xgb-all": 3000}
    other = slowed.merged({"faults": {"slow_members_ms": {"logreg-all": 200}}})
    assert other.faults.slow_members_ms == {"logreg-all": 200}  # not merged per member
    assert other.merged({"faults": {"slow_members_ms": {}}}).faults == BASELINE.faults
    assert slowed.merged({"quorum": 0.8}).faults == slowed.faults


@pytest.mark.parametrize(
    "change, message",
    [
        ({"quorum": 1.5}, "quorum"),
        ({"faults": {"slow_members_ms": {"xgb-all": -1}}}, "greater than or equal to 0"),
        ({"request_budget_ms": 0}, "request_budget_ms"),
        ({"coalescing": {"max_in_flight": 0}}, "max_in_flight"),
        ({"member_weights": {"xgb-all": -1}}, ">= 0"),
        ({"budget": 5}, "budget"),  # misspelt: refused, not ignored
    ],
)
def test_invalid_values_are_refused(change, message):
    with pytest.raises(ValidationError) as err:
        BASELINE.merged(change)
    assert message in explain(err.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"member_weights": {"no-such": 1}}, "not members"),
        ({"faults": {"slow_members_ms": {"no-such": 100}}}, "not members"),
        ({"member_weights": {"xgb-all": 0, "logreg-all": 0}}, "no member with a positive"),
        ({"coalescing": {"max_rows": 2048}}, "max_batch_rows"),
    ],
)
def test_values_that_do_not_fit_the_ensemble_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        BASELINE.merged(change).checked(TRAINED, 1024)


ROUTER = RouterKnobs(
    weights={"2026-10": 90, "2026-11": 10}, request_budget_ms=1000, failover_reserve_ms=250
)


def test_router_weights_merge_per_version_and_an_empty_change_is_the_baseline():
    assert ROUTER.merged({"weights": {"2026-11": 20}}).weights == {"2026-10": 90, "2026-11": 20}
    assert ROUTER.merged({"request_budget_ms": 800}).weights == ROUTER.weights
    assert ROUTER.merged({}) is ROUTER


@pytest.mark.parametrize(
    "change, message",
    [
        ({"weights": {"2026-10": 0, "2026-11": 0}}, "not all be 0"),
        ({"weights": {"2026-10": float("inf")}}, "finite"),
        ({"weights": {"2026-11": -1}}, "finite and >= 0"),
        ({"failover_reserve_ms": 1000}, "below request_budget_ms"),
        ({"weights": [1, 2]}, "mapping"),
        ({"weight": {"2026-11": 5}}, "weight"),
    ],
)
def test_bad_router_changes_are_refused(change, message):
    with pytest.raises(ValueError) as err:
        ROUTER.merged(change)
    assert message in explain(err.value)


def test_router_weights_must_name_served_versions():
    with pytest.raises(ValueError, match="does not serve"):
        ROUTER.merged({"weights": {"2027-01": 5}}).checked(["2026-10", "2026-11"])


def test_member_weights_must_be_finite():
    with pytest.raises(ValidationError, match="finite"):
        BASELINE.merged({"member_weights": {"xgb-all": float("inf")}})
