"""Runtime knobs: the values an operator changes on a running service, without a restart.

They travel as Serve `user_config` (set under `deployments:` of an application in the Serve
config) and are applied in the replica's `reconfigure()`. Serve treats a change there as a
lightweight update: the same replicas, reconfigured in place. A change to an application's
`args`, by contrast, changes its code version and replaces every replica.

The application's `args` give the baseline; a `user_config` names only what it changes and
is merged over that baseline. A change that does not validate is refused: the replica logs
it, keeps the values it had and reports the refusal in `GET /v1/ensemble`, rather than
raising in `reconfigure()`, which Serve would turn into a restart loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Self

from pydantic import Field, ValidationError, model_validator

from app.config.strict import FrozenModel

# Each knob's bound, declared once: the args (which give the defaults) and the live knobs
# (which take a change) both declare their fields with these types.
# A login's whole time budget in ms: the args of an ensemble and of a router, and the live
# knobs of both.
BudgetMs = Annotated[float, Field(gt=0, le=10_000)]
# Share of the ensemble's weight that must answer for a personalized offer.
Quorum = Annotated[float, Field(ge=0, le=1)]
# Once the quorum answered, how much longer to wait for the others (None: the budget).
GraceMs = Annotated[float, Field(ge=0)] | None
CoalescedRows = Annotated[int, Field(ge=1)]
RoundsInFlight = Annotated[int, Field(ge=1, le=64)]
HoldMs = Annotated[float, Field(gt=0, le=10_000)]
# Budget a router keeps back from the assigned version for another to answer in.
ReserveMs = Annotated[float, Field(ge=0)]


class CoalescingLimits(FrozenModel):
    """The live limits of the supervisor's coalescer (whether it coalesces is structural).

    No defaults here or below: the baseline always comes from the app's args
    (EnsembleAppArgs.knobs()), the one place the defaults live."""

    max_rows: CoalescedRows
    max_in_flight: RoundsInFlight
    max_hold_ms: HoldMs


class FaultInjection(FrozenModel):
    """Faults for chaos tests and drills, off by default and live like the other knobs: the
    supervisor applies them to the members it scores inline (its user_config's `faults`),
    each member deployment to its own (MemberGroupConfig's `faults`)."""

    slow_members_ms: dict[str, Annotated[float, Field(ge=0, le=600_000)]] = Field(
        default_factory=dict,
        description="member name -> delay added before it scores each request. In a group "
        "the whole group waits for its slowest member.",
    )


class SupervisorKnobs(FrozenModel):
    """The supervisor's user_config, whole (after merging a partial change over the baseline)."""

    request_budget_ms: BudgetMs
    quorum: Quorum
    straggler_grace_ms: GraceMs
    # member name -> weight in the aggregate and in the quorum, instead of its trained weight.
    # 0 weights a member out: it may still be scored (its group is called anyway), but it
    # counts for nothing and is reported as missing ("weighted_out").
    member_weights: dict[str, float]
    coalescing: CoalescingLimits
    faults: FaultInjection

    @model_validator(mode="after")
    def _non_negative_weights(self) -> Self:
        bad = {name: w for name, w in self.member_weights.items() if not 0 <= w < math.inf}
        if bad:
            raise ValueError(f"member_weights must be finite and >= 0, got {bad}")
        return self

    def checked(self, members: Mapping[str, float], max_batch_rows: int) -> Self:
        """These knobs, if they fit this ensemble; ValueError naming what does not."""
        unknown = sorted(set(self.member_weights) - set(members))
        if unknown:
            raise ValueError(
                f"member_weights names {unknown}, not members of this version ({sorted(members)})"
            )
        slowed = sorted(set(self.faults.slow_members_ms) - set(members))
        if slowed:
            raise ValueError(
                f"faults.slow_members_ms names {slowed}, not members of this version "
                f"({sorted(members)})"
            )
        if sum(self.weights(members).values()) <= 0:
            raise ValueError("member_weights leave no member with a positive weight")
        if self.coalescing.max_rows > max_batch_rows:
            raise ValueError(
                f"coalescing.max_rows ({self.coalescing.max_rows}) exceeds the members' "
                f"batching.max_batch_rows ({max_batch_rows}): every member call would fail"
            )
        return self

    def weights(self, trained: Mapping[str, float]) -> dict[str, float]:
        """Every member's effective weight: the override, or the trained weight."""
        return {name: self.member_weights.get(name, w) for name, w in trained.items()}

    def merged(self, change: Mapping[str, Any] | None) -> SupervisorKnobs:
        """This baseline with a partial change on top; pydantic's ValidationError if invalid."""
        if not change:
            return self
        # member_weights and the delays are replaced whole: a change lists every override
        # it wants (an empty mapping clears them).
        merged = deep_merge(
            self.model_dump(),
            dict(change),
            replace=frozenset({"member_weights", "slow_members_ms"}),
        )
        return SupervisorKnobs.model_validate(merged)


class RouterKnobs(FrozenModel):
    """The router's user_config, whole: version weights and the routed budget.

    A change names only what it changes; `weights` merges per version (name one version to
    change its weight, the others keep theirs). No defaults: the baseline always comes from
    the router's args (RouterAppArgs.knobs())."""

    weights: dict[str, float]
    request_budget_ms: BudgetMs
    failover_reserve_ms: ReserveMs

    @model_validator(mode="after")
    def _usable(self) -> Self:
        if not self.weights:
            raise ValueError("weights must name at least one version")
        bad = {v: w for v, w in self.weights.items() if not 0 <= w < math.inf}
        if bad:
            raise ValueError(f"version weights must be finite and >= 0, got {bad}")
        if sum(self.weights.values()) <= 0:
            raise ValueError("version weights must not all be 0")
        if self.failover_reserve_ms >= self.request_budget_ms:
            raise ValueError("failover_reserve_ms must be below request_budget_ms")
        return self

    def checked(self, versions: Iterable[str]) -> Self:
        known = set(versions)
        unknown = sorted(set(self.weights) - known)
        if unknown:
            raise ValueError(
                f"weights name {unknown}, which this router does not serve ({sorted(known)})"
            )
        return self

    def merged(self, change: Mapping[str, Any] | None) -> RouterKnobs:
        """This baseline with a partial change on top; pydantic's ValidationError if invalid."""
        if not change:
            return self
        merged = {**self.model_dump(), **{k: v for k, v in change.items() if k != "weights"}}
        weights = change.get("weights")
        if weights is not None:
            if not isinstance(weights, Mapping):
                raise ValueError(f"weights must be a mapping of version -> weight, got {weights!r}")
            merged["weights"] = {**self.weights, **weights}
        return RouterKnobs.model_validate(merged)


def explain(exc: Exception) -> str:
    """One line for a log or an API field: pydantic's errors without their URLs."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc)


def deep_merge(
    base: dict[str, Any], changes: dict[str, Any], *, replace: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """`base` with a partial, YAML-shaped `changes` on top; keys in `replace`, at any depth,
    are taken whole."""
    merged = dict(base)
    for key, value in changes.items():
        nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = (
            deep_merge(merged[key], value, replace=replace)
            if nested and key not in replace
            else value
        )
    return merged
