"""The game router's args: partial deployment settings, and its edge bound."""

import pytest
from pydantic import ValidationError

from app.config.app_args import UTILIZATION_POLICY
from app.config.router_args import ROUTER_DEFAULTS, RouterAppArgs

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

BASE = {"game": "galaxy-raiders", "versions": [{"version": "2026-10", "weight": 1}]}


def test_a_partial_router_entry_keeps_the_routers_defaults():
    args = RouterAppArgs.model_validate(
        {**BASE, "router": {"num_cpus": 0.5, "autoscaling": {"min_replicas": 2}}}
    )
    assert args.router.num_cpus == 0.5 and args.router.autoscaling.min_replicas == 2
    assert args.router.max_ongoing_requests == ROUTER_DEFAULTS.max_ongoing_requests
    assert args.router.autoscaling.target_utilization == (
        ROUTER_DEFAULTS.autoscaling.target_utilization
    )


def test_the_router_scales_on_the_logins_it_holds_over_its_bound():
    options = RouterAppArgs.model_validate(BASE).router.to_options("router")
    policy = options["autoscaling_config"]["policy"]
    assert policy["policy_function"] == UTILIZATION_POLICY
    assert policy["policy_kwargs"]["target_utilization"] == 0.5
    # A fixed-size node: no replica where no core is idle.
    guarded = RouterAppArgs.model_validate(
        {**BASE, "router": {"autoscaling": {"min_idle_cpus": 0.5}}}
    ).router.to_options("router")
    assert guarded["autoscaling_config"]["policy"]["policy_kwargs"]["min_idle_cpus"] == 0.5


def test_an_ongoing_requests_target_the_edge_never_lets_in_is_refused():
    # HAProxy lets at most admission.max_in_flight logins into one router replica: Serve's
    # ongoing count never passes it, so a target of 64 over a bound of 32 never scaled.
    never = {"autoscaling": {"signal": "ongoing_requests", "target_ongoing_requests": 64}}
    with pytest.raises(ValidationError, match="never"):
        RouterAppArgs.model_validate({**BASE, "router": never})
    reachable = {"autoscaling": {"signal": "ongoing_requests", "target_ongoing_requests": 16}}
    args = RouterAppArgs.model_validate({**BASE, "router": reachable})
    assert args.router.to_options("router")["autoscaling_config"]["target_ongoing_requests"] == 16


def test_the_edge_bound_must_stay_below_what_serve_lets_a_replica_hold():
    with pytest.raises(ValidationError, match="admission.max_in_flight"):
        RouterAppArgs.model_validate(
            {**BASE, "admission": {"max_in_flight": 64}, "router": {"max_ongoing_requests": 64}}
        )


def test_a_bare_ongoing_requests_target_on_the_utilization_router_is_refused():
    with pytest.raises(ValidationError, match="target_ongoing_requests"):
        RouterAppArgs.model_validate(
            {**BASE, "router": {"autoscaling": {"target_ongoing_requests": 16}}}
        )
    with pytest.raises(ValidationError, match="below 1"):
        RouterAppArgs.model_validate(
            {**BASE, "router": {"autoscaling": {"target_utilization": 1.0}}}
        )


def test_the_routers_edge_queue_timeout_is_half_its_budget_and_must_stay_below_it():
    args = RouterAppArgs.model_validate({**BASE, "request_budget_ms": 800})
    assert args.admission.queue_timeout_ms(args.request_budget_ms) == 400
    with pytest.raises(ValidationError, match="must be below request_budget_ms"):
        RouterAppArgs.model_validate(
            {**BASE, "request_budget_ms": 800, "admission": {"edge_queue_timeout_ms": 900}}
        )
