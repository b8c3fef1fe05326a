"""The game router's args: partial deployment settings, and its edge bound."""

import pytest
from pydantic import ValidationError

from app.config.router_args import ROUTER_DEFAULTS, RouterAppArgs

pytestmark = pytest.mark.unit

BASE = {"game": "galaxy-raiders", "versions": [{"version": "2026-10", "weight": 1}]}


def test_a_partial_router_entry_keeps_the_routers_defaults():
    args = RouterAppArgs.model_validate(
        {**BASE, "router": {"num_cpus": 0.5, "autoscaling": {"min_replicas": 2}}}
    )
    assert args.router.num_cpus == 0.5 and args.router.autoscaling.min_replicas == 2
    assert args.router.max_ongoing_requests == ROUTER_DEFAULTS.max_ongoing_requests
    assert args.router.autoscaling.target_ongoing_requests == (
        ROUTER_DEFAULTS.autoscaling.target_ongoing_requests
    )


def test_the_edge_bound_must_stay_below_what_serve_lets_a_replica_hold():
    with pytest.raises(ValidationError, match="admission.max_in_flight"):
        RouterAppArgs.model_validate(
            {**BASE, "admission": {"max_in_flight": 64}, "router": {"max_ongoing_requests": 64}}
        )
