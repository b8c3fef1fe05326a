"""The typed `args:` of a game's router application (app.serving.builder:build_router)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from app.config.app_args import (
    AdmissionConfig,
    AutoscalingArgs,
    DeploymentArgs,
    check_reachable_target,
)
from app.config.knobs import BudgetMs, ReserveMs, RouterKnobs
from app.config.strict import StrictModel
from app.contract.ids import GAME_PATTERN, VERSION_PATTERN

# The router only hashes a player id and forwards: very light, many logins per replica. It
# scales on utilization, the logins it holds over its admission bound (app.serving.router),
# as the supervisors do: the bound caps what Serve's ongoing-requests count could ever see.
ROUTER_DEFAULTS = DeploymentArgs(
    num_cpus=0.1,
    max_ongoing_requests=256,
    max_queued_requests=128,
    autoscaling=AutoscalingArgs(
        min_replicas=1, max_replicas=2, signal="utilization", target_utilization=0.5
    ),
)


class VersionEntry(StrictModel):
    version: str = Field(pattern=VERSION_PATTERN)
    application: str | None = Field(
        default=None, description="the version's Serve application; default <game>-<version>"
    )
    weight: float = Field(ge=0, description="share of players, relative to the others")


class RouterAppArgs(StrictModel):
    game: str = Field(pattern=GAME_PATTERN)
    # The stable version first: when a version cannot answer, its players go to the
    # version with the most weight (app.core.routing.offer_routing).
    versions: list[VersionEntry] = Field(min_length=1)
    request_budget_ms: BudgetMs = Field(default=1000.0, description="a routed login's whole budget")
    failover_reserve_ms: ReserveMs = Field(
        default=250.0,
        description="budget kept back from the assigned version so another can still answer "
        "if it fails or stays silent",
    )
    retry_after_s: float = Field(default=1.0, ge=0)
    # The bound is enforced at the edge only (HAProxy's maxconn per router replica): the
    # router holds no work of its own, the versions it calls keep their own gates. The queue
    # timeout bounds a login's wait in HAProxy's queue and, for what is left of it, in the
    # router for room on its version (app.core.routing.version_load).
    admission: AdmissionConfig = Field(default_factory=lambda: AdmissionConfig(max_in_flight=32))
    router: DeploymentArgs = Field(default_factory=lambda: ROUTER_DEFAULTS)

    @field_validator("router", mode="before")
    @classmethod
    def _on_top_of_defaults(cls, value: Any) -> Any:
        # A partial `router:` (say, only autoscaling) keeps the router's other defaults
        # rather than the generic DeploymentArgs ones (max_ongoing_requests 32, not above
        # its admission bound).
        return ROUTER_DEFAULTS.updated(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.admission.max_in_flight >= self.router.max_ongoing_requests:
            raise ValueError(
                f"admission.max_in_flight ({self.admission.max_in_flight}) must be below "
                f"router.max_ongoing_requests ({self.router.max_ongoing_requests})"
            )
        self.admission.check_queue_timeout(self.request_budget_ms)
        check_reachable_target(self.router.autoscaling, self.admission.max_in_flight, "router")
        names = [v.version for v in self.versions]
        if len(set(names)) != len(names):
            raise ValueError(f"versions listed twice: {names}")
        self.knobs()  # weights usable, reserve below the budget
        return self

    def applications(self) -> dict[str, str]:
        return {v.version: v.application or f"{self.game}-{v.version}" for v in self.versions}

    def knobs(self) -> RouterKnobs:
        """The router's live knobs as these args set them (the baseline a user_config is
        merged over)."""
        return RouterKnobs(
            weights={v.version: v.weight for v in self.versions},
            request_budget_ms=self.request_budget_ms,
            failover_reserve_ms=self.failover_reserve_ms,
        )
