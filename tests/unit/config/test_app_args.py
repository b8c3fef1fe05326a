"""One config surface: every args model rejects unknown keys; impossible combinations fail."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config.app_args import (
    MEMBER_DEFAULTS,
    SUPERVISOR_DEFAULTS,
    AdmissionConfig,
    BatchingConfig,
    CoalescingConfig,
    EnsembleAppArgs,
    FaultInjection,
    MemberGroupConfig,
    MemberLayout,
)
from app.config.knobs import SupervisorKnobs
from app.serving.supervisor import SupervisorConfig

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

BASE = {"game": "galaxy-raiders", "version": "2026-11"}


@pytest.mark.parametrize(
    "args",
    [
        {**BASE, "colour": "blue"},
        {**BASE, "batching": {"max_batch_rows": 64, "max_batch_size": 64}},
        {**BASE, "coalescing": {"max_inflight": 2}},
        {**BASE, "admission": {"max_inflight": 2}},
        {**BASE, "layout": {"group": 2}},
        {**BASE, "faults": {"slow_member_ms": {}}},
        {**BASE, "supervisor": {"cpus": 1}},
        {**BASE, "members": {"autoscaling": {"max_replica": 3}}},
        {**BASE, "member_deployments": {"member-group-0": {"cpus": 1}}},
    ],
)
def test_unknown_keys_are_rejected_at_every_level(args):
    with pytest.raises(ValidationError):
        EnsembleAppArgs.model_validate(args)


@pytest.mark.parametrize(
    "model",
    [
        AdmissionConfig,
        BatchingConfig,
        CoalescingConfig,
        MemberLayout,
        FaultInjection,
        MemberGroupConfig,
    ],
)
def test_every_part_forbids_extra_keys(model):
    assert model.model_config.get("extra") == "forbid"


def test_coalesced_rounds_larger_than_a_member_batch_are_rejected_with_the_reason():
    with pytest.raises(
        ValidationError, match=r"max_rows \(2048\) exceeds.*max_batch_rows \(1024\)"
    ):
        EnsembleAppArgs.model_validate({**BASE, "coalescing": {"max_rows": 2048}})
    # Without coalescing there are no rounds to be too large.
    EnsembleAppArgs.model_validate({**BASE, "coalescing": {"enabled": False, "max_rows": 2048}})


def test_a_partial_deployment_entry_keeps_its_roles_defaults():
    args = EnsembleAppArgs.model_validate(
        {**BASE, "supervisor": {"max_ongoing_requests": 100}, "members": {"num_cpus": 0.3}}
    )
    assert args.supervisor.max_ongoing_requests == 100
    assert args.supervisor.num_cpus == SUPERVISOR_DEFAULTS.num_cpus
    assert args.supervisor.autoscaling == SUPERVISOR_DEFAULTS.autoscaling
    assert args.members.num_cpus == 0.3
    assert args.members.max_queued_requests == MEMBER_DEFAULTS.max_queued_requests


def test_min_replicas_above_max_is_rejected():
    with pytest.raises(ValidationError, match="exceeds max_replicas"):
        EnsembleAppArgs.model_validate(
            {**BASE, "members": {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}}
        )


def test_the_quorum_default_lives_in_the_args_only():
    assert EnsembleAppArgs.model_validate(BASE).quorum == 0.5
    assert EnsembleAppArgs.model_validate(BASE).knobs().quorum == 0.5
    # The supervisor's knobs have no default of their own: the builder must pass the args'.
    with pytest.raises(ValidationError, match="quorum"):
        SupervisorKnobs.model_validate(
            {
                "request_budget_ms": 1000,
                "straggler_grace_ms": None,
                "member_weights": {},
                "coalescing": {"max_rows": 1, "max_in_flight": 1, "max_hold_ms": 1},
            }
        )
    with pytest.raises(ValidationError, match="knobs"):
        SupervisorConfig(
            version_dir="/x",
            coalescing_enabled=True,
            max_batch_rows=1024,
            groups={},
            max_in_flight=1,
            retry_after_s=1,
        )


def test_admission_must_stay_below_the_supervisors_max_ongoing_requests():
    # Otherwise Serve would queue logins before the gate, where no budget runs.
    with pytest.raises(ValidationError, match=r"admission.max_in_flight \(64\) must be below"):
        EnsembleAppArgs.model_validate(
            {**BASE, "admission": {"max_in_flight": 64}, "supervisor": {"max_ongoing_requests": 64}}
        )
    args = EnsembleAppArgs.model_validate({**BASE, "admission": {"max_in_flight": 63}})
    assert args.admission.max_in_flight < args.supervisor.max_ongoing_requests


def test_max_replicas_per_node_reaches_serve_only_when_set():
    args = EnsembleAppArgs.model_validate({**BASE, "supervisor": {"max_replicas_per_node": 1}})
    assert args.supervisor.to_options("supervisor")["max_replicas_per_node"] == 1
    assert "max_replicas_per_node" not in args.members.to_options("member-group-0")


def test_replicas_are_checked_every_2_s_unless_configured():
    # Serve notices a killed replica only at its next health check (its default: 10 s).
    args = EnsembleAppArgs.model_validate({**BASE, "members": {"health_check_period_s": 0.5}})
    assert args.supervisor.to_options("supervisor")["health_check_period_s"] == 2.0
    assert args.members.to_options("member-x")["health_check_period_s"] == 0.5


def test_memory_is_reserved_in_bytes_only_when_set():
    args = EnsembleAppArgs.model_validate({**BASE, "members": {"memory_mb": 512}})
    assert args.members.to_options("member-x")["ray_actor_options"] == {
        "num_cpus": args.members.num_cpus,
        "memory": 512 * 2**20,
    }
    assert "memory" not in args.supervisor.to_options("supervisor")["ray_actor_options"]


def test_supervisor_and_members_scale_on_utilization_through_our_policy():
    from app.config.app_args import UTILIZATION_POLICY

    args = EnsembleAppArgs.model_validate(
        {**BASE, "members": {"autoscaling": {"max_replicas": 3, "target_utilization": 0.5}}}
    )
    members = args.members.to_options("member-x")["autoscaling_config"]
    assert members["policy"] == {
        "policy_function": UTILIZATION_POLICY,
        "policy_kwargs": {"target_utilization": 0.5},
    }
    assert members["max_replicas"] == 3 and "signal" not in members
    assert "policy" in args.supervisor.to_options("supervisor")["autoscaling_config"]
    # Serve's own signal when asked: no policy, Serve's default on ongoing requests.
    ongoing = EnsembleAppArgs.model_validate(
        {**BASE, "members": {"autoscaling": {"signal": "ongoing_requests"}}}
    )
    assert "policy" not in ongoing.members.to_options("member-x")["autoscaling_config"]


def test_a_supervisor_target_it_can_never_hold_is_refused():
    # The admission bound caps the logins a supervisor holds, so Serve would never see more
    # ongoing requests than that: a target at or above it could never add a replica.
    ongoing = {"autoscaling": {"signal": "ongoing_requests", "target_ongoing_requests": 16}}
    with pytest.raises(ValidationError, match="never"):
        EnsembleAppArgs.model_validate(
            {**BASE, "admission": {"max_in_flight": 16}, "supervisor": ongoing}
        )
    below = {"autoscaling": {"signal": "ongoing_requests", "target_ongoing_requests": 15}}
    args = EnsembleAppArgs.model_validate(
        {**BASE, "admission": {"max_in_flight": 16}, "supervisor": below}
    )
    assert args.supervisor.to_options("supervisor")["autoscaling_config"][
        "target_ongoing_requests"
    ] == 15
    # The utilization signal is a share of the bound: no such limit.
    EnsembleAppArgs.model_validate({**BASE, "admission": {"max_in_flight": 2}})


def test_a_utilization_target_a_full_replica_only_reaches_is_refused():
    # A supervisor never holds more than its bound: utilization tops out at 1.
    with pytest.raises(ValidationError, match="below 1"):
        EnsembleAppArgs.model_validate(
            {**BASE, "supervisor": {"autoscaling": {"target_utilization": 1.0}}}
        )
    # Members are not ingress replicas: their utilization (time spent scoring) is not capped
    # by an admission bound, and 1.0 stays allowed for them.
    members = {"autoscaling": {"target_utilization": 1.0}}
    EnsembleAppArgs.model_validate({**BASE, "members": members})


@pytest.mark.parametrize(
    ("role", "scaling", "key"),
    [
        ("supervisor", {"target_ongoing_requests": 8}, "target_ongoing_requests"),
        ("members", {"target_ongoing_requests": 8}, "target_ongoing_requests"),
        ("supervisor", {"signal": "ongoing_requests", "min_idle_cpus": 0.5}, "min_idle_cpus"),
    ],
)
def test_a_key_of_the_signal_a_deployment_does_not_scale_on_is_refused(role, scaling, key):
    # Merged over the role's defaults, it would be ignored without a word.
    with pytest.raises(ValidationError, match=key):
        EnsembleAppArgs.model_validate({**BASE, role: {"autoscaling": scaling}})


def test_the_edge_queue_timeout_defaults_to_half_the_budget():
    # Long enough that a login HAProxy queued is scored rather than refused late.
    assert EnsembleAppArgs.model_validate(BASE).admission.queue_timeout_ms(1000.0) == 500
    args = EnsembleAppArgs.model_validate({**BASE, "request_budget_ms": 300})
    assert args.admission.queue_timeout_ms(args.request_budget_ms) == 150
    explicit = EnsembleAppArgs.model_validate({**BASE, "admission": {"edge_queue_timeout_ms": 40}})
    assert explicit.admission.queue_timeout_ms(explicit.request_budget_ms) == 40


def test_an_edge_queue_timeout_as_long_as_the_budget_is_rejected_with_the_reason():
    with pytest.raises(ValidationError, match=r"edge_queue_timeout_ms \(300\) must be below"):
        EnsembleAppArgs.model_validate(
            {**BASE, "request_budget_ms": 300, "admission": {"edge_queue_timeout_ms": 300}}
        )
