"""Application builder named by `import_path` in serve_config.yaml: one app per (game, version)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray.serve import Application
from ray.serve.config import BackpressureConfig

from app.manifest import MANIFEST_FILENAME, load_manifest
from app.member_groups import MemberLayout, plan_groups
from app.members import BatchingConfig, FaultInjection, MemberGroupConfig, MemberGroupDeployment
from app.schemas import GAME_PATTERN
from app.settings import get_settings
from app.supervisor import CoalescingConfig, Supervisor, SupervisorConfig


class AutoscalingArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=2, ge=1)
    target_ongoing_requests: float = Field(default=4.0, gt=0)

    def to_serve(self) -> dict[str, Any]:
        return self.model_dump()


class DeploymentArgs(BaseModel):
    """Code defaults for a deployment; serve_config.yaml `deployments:` entries override them."""

    model_config = ConfigDict(extra="forbid")

    num_cpus: float = Field(default=0.1, gt=0, le=64)
    max_ongoing_requests: int = Field(default=32, ge=1)
    # Requests waiting at each caller beyond max_ongoing_requests; more are rejected at once
    # (HTTP 503 with Retry-After for the ingress) instead of queueing into timeouts.
    max_queued_requests: int = Field(default=64, ge=1)
    autoscaling: AutoscalingArgs = Field(default_factory=AutoscalingArgs)

    def to_options(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "ray_actor_options": {"num_cpus": self.num_cpus},
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "autoscaling_config": self.autoscaling.to_serve(),
        }


class EnsembleAppArgs(BaseModel):
    """Typed `args:` of one application in serve_config.yaml."""

    model_config = ConfigDict(extra="forbid")

    game: str = Field(pattern=GAME_PATTERN)
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
    profile: str = Field(default="standard", pattern=r"^[a-z0-9_-]{1,32}$")
    artifacts_root: Path | None = Field(
        default=None, description="folder holding <profile>/<game>/<version>; default from settings"
    )
    request_budget_ms: float = Field(default=1000.0, gt=0, le=10_000)
    quorum: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="share of the ensemble's weight that must answer in time for a "
        "personalized offer; below it the answer is the fallback (reason `quorum`)",
    )
    retry_after_s: float = Field(default=1.0, ge=0, description="Retry-After on 503")
    supervisor: DeploymentArgs = Field(
        default_factory=lambda: DeploymentArgs(
            num_cpus=0.2,
            max_ongoing_requests=256,
            max_queued_requests=128,
            autoscaling=AutoscalingArgs(min_replicas=1, max_replicas=2, target_ongoing_requests=64),
        )
    )
    members: DeploymentArgs = Field(default_factory=DeploymentArgs)
    layout: MemberLayout = Field(default_factory=MemberLayout)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    coalescing: CoalescingConfig = Field(default_factory=CoalescingConfig)
    faults: FaultInjection = Field(default_factory=FaultInjection)

    def version_dir(self) -> Path:
        root = self.artifacts_root or get_settings().artifacts_root
        return (root / self.profile / self.game / self.version).resolve()


class ArtifactsMissing(FileNotFoundError):
    pass


def build_app(args: dict[str, Any] | EnsembleAppArgs) -> Application:
    """Supervisor bound to the member group deployments of `args.layout`."""
    args = EnsembleAppArgs.model_validate(args)
    version_dir = args.version_dir()
    if not (version_dir / MANIFEST_FILENAME).is_file():
        raise ArtifactsMissing(
            f"no trained ensemble at {version_dir}; run `make models` (or "
            f"`python -m models.train --game {args.game} --version {args.version} "
            f"--profile {args.profile}`)"
        )
    manifest = load_manifest(version_dir)
    if (manifest.game, manifest.version) != (args.game, args.version):
        raise ValueError(
            f"{version_dir} holds {manifest.game}/{manifest.version}, "
            f"not {args.game}/{args.version}"
        )
    groups = plan_groups(manifest.members, args.layout)
    deployments = {
        group.deployment: MemberGroupDeployment.options(
            **args.members.to_options(group.deployment),
            user_config=MemberGroupConfig(batching=args.batching, faults=args.faults).model_dump(),
        ).bind(list(group.members), str(version_dir))
        for group in groups
    }
    supervisor = Supervisor.options(
        **args.supervisor.to_options("supervisor"),
        # Overload is an explicit, retryable answer: 503 + Retry-After from the proxy.
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=args.retry_after_s),
    )
    config = SupervisorConfig(
        version_dir=str(version_dir),
        request_budget_ms=args.request_budget_ms,
        groups={g.deployment: [e.name for e in g.members] for g in groups},
        coalescing=args.coalescing,
        quorum=args.quorum,
    )
    return supervisor.bind(config, deployments)
