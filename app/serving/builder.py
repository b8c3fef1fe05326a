"""Application builder named by `import_path` in serve_config.yaml: one app per (game, version)."""

from __future__ import annotations

from typing import Any

import ray
from ray.serve import Application, Deployment
from ray.serve.config import BackpressureConfig

from app.adapters.cpu_priority import start_niced
from app.adapters.model_store import local_version
from app.config.app_args import EnsembleAppArgs, MemberGroupConfig
from app.config.router_args import RouterAppArgs
from app.config.settings import get_settings
from app.contract import deployments
from app.contract.manifest import MANIFEST_FILENAME, Manifest, load_manifest
from app.serving import worker_entry
from app.serving.member_group import MemberGroupDeployment
from app.serving.member_layout import PlacedMembers, place_members, possible_deployments
from app.serving.router import RouterConfig, VersionRouter
from app.serving.supervisor import Supervisor, SupervisorConfig

SUPERVISOR_DEPLOYMENT = deployments.SUPERVISOR
ROUTER_DEPLOYMENT = deployments.ROUTER


class ArtifactsMissing(FileNotFoundError):
    pass


class ImpossibleConfig(ValueError):
    """The args are valid one by one but cannot work together with this ensemble."""


def build_app(args: dict[str, Any] | EnsembleAppArgs) -> Application:
    """Supervisor bound to the member deployments of `args.layout` (scoring the members the
    layout keeps inline itself)."""
    args = EnsembleAppArgs.model_validate(args)
    # From the store: this node's cached copy (the replicas make their own node's).
    source = args.version_source()
    version_dir = local_version(source)
    if not (version_dir / MANIFEST_FILENAME).is_file():
        raise ArtifactsMissing(
            f"no trained ensemble at {version_dir}; run `make models` (or "
            f"`.venv/bin/offers train --game {args.game} --version {args.version} "
            f"--profile {args.profile}`)"
        )
    manifest = load_manifest(version_dir)
    if (manifest.game, manifest.version, manifest.profile) != (
        args.game,
        args.version,
        args.profile,
    ):
        # A store holds one build of a version: a config asking for another profile of it
        # would otherwise serve the published one under the wrong name.
        raise ValueError(
            f"{source} holds {manifest.game}/{manifest.version} of profile "
            f"{manifest.profile!r}, not {args.game}/{args.version} of {args.profile!r}"
        )
    placed = place_members(manifest, args.layout, version_dir, runtime=args.runtime)
    check_member_deployments(args, manifest, placed)
    try:
        knobs = args.knobs().checked(
            {e.name: e.weight for e in manifest.members}, args.batching.max_batch_rows
        )
    except ValueError as exc:
        raise ImpossibleConfig(f"{args.game}/{args.version}: {exc}") from exc
    member_config = MemberGroupConfig(batching=args.batching, faults=args.faults).model_dump()
    deployments = {
        group.deployment: _deployment(MemberGroupDeployment)
        .options(
            **niced(
                args.members.updated(args.member_deployments.get(group.deployment, {})).to_options(
                    group.deployment
                )
            ),
            user_config=member_config,
        )
        .bind(list(group.members), source, args.runtime)
        for group in placed.groups
    }
    supervisor = _deployment(Supervisor).options(
        **niced(args.supervisor.to_options(SUPERVISOR_DEPLOYMENT)),
        # Overload is an explicit, retryable answer: 503 + Retry-After. The supervisor's own
        # admission gate (args.admission) refuses first; this is Serve's backstop behind it.
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=args.retry_after_s),
        # The live knobs start empty: the args' values apply until a Serve config sets
        # `user_config` for this deployment (partial: merged over them). Changing them there
        # reconfigures the running replicas; changing args replaces them.
        user_config={},
    )
    config = SupervisorConfig(
        version_dir=source,
        runtime=args.runtime,
        knobs=knobs,
        coalescing_enabled=args.coalescing.enabled,
        max_batch_rows=args.batching.max_batch_rows,
        groups={g.deployment: [e.name for e in g.members] for g in placed.groups},
        inline=[e.name for e in placed.inline],
        placements=placed.placements(),
        max_in_flight=args.admission.max_in_flight,
        adaptive_admission=args.admission.adaptive,
        queue_timeout_ms=args.admission.queue_timeout_ms(args.request_budget_ms),
        retry_after_s=args.retry_after_s,
        precomputed=args.precomputed,
    )
    app: Application = supervisor.bind(config, deployments)
    return app


def build_router(args: dict[str, Any] | RouterAppArgs) -> Application:
    """A game's version router: POST /<game>/v1/offers, sticky by player, over the
    applications of its versions (each built by build_app). Weights are live: the
    deployment's user_config ({"weights": {...}}) overrides the args' weights."""
    args = RouterAppArgs.model_validate(args)
    router = _deployment(VersionRouter).options(
        **niced(args.router.to_options(ROUTER_DEPLOYMENT)),
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=args.retry_after_s),
        user_config={},
    )
    config = RouterConfig(
        game=args.game,
        applications=args.applications(),
        knobs=args.knobs(),
        ingress_deployment=SUPERVISOR_DEPLOYMENT,
        retry_after_s=args.retry_after_s,
        max_in_flight=args.admission.max_in_flight,
        queue_timeout_ms=args.admission.queue_timeout_ms(args.request_budget_ms),
    )
    app: Application = router.bind(config)
    return app


def niced(options: dict[str, Any]) -> dict[str, Any]:
    """A deployment's Serve options with its replicas started through
    app.serving.worker_entry (no pandas), at their niceness from the first instruction
    (app.adapters.cpu_priority.start_niced): a replacement starting beside serving replicas
    never outranks them.

    Serve gives a deployment the application's runtime_env (the config's `env_vars`: the
    DynamoDB endpoint, the credentials) only when its code sets none, so this one starts from
    the application's: the runtime_env the build runs with, where Serve reads its default.
    And it always holds `env_vars`, if empty: a `serve deploy` that overrides a deployment's
    options (its `user_config`) merges the application's runtime_env into it again, adding
    that key, and a runtime_env that changed replaces every replica of the deployment."""
    application = application_runtime_env()
    actor = options.get("ray_actor_options", {})
    return {
        **options,
        "ray_actor_options": {
            **actor,
            "runtime_env": {
                **application,
                "env_vars": dict(application.get("env_vars") or {}),
                **replica_runtime_env(get_settings().replica_niceness),
            },
        },
    }


def replica_runtime_env(niceness: int) -> dict[str, Any]:
    """Ray's `py_executable` for a replica's worker: worker_entry's command, under `nice` at
    `niceness` where there is something to raise."""
    command = worker_entry.command()
    return start_niced(niceness, command) or {"py_executable": command}


def application_runtime_env() -> dict[str, Any]:
    """The runtime_env of the application being built (its Serve config's), or none outside
    a Ray worker (a build in a test)."""
    if not ray.is_initialized():
        return {}
    return dict(ray.get_runtime_context().runtime_env)


def _deployment(decorated: object) -> Deployment:
    # @serve.deployment turns a class into a Deployment at run time; mypy sees the class.
    if not isinstance(decorated, Deployment):
        raise TypeError(f"{decorated!r} is not a Serve deployment")
    return decorated


def check_member_deployments(
    args: EnsembleAppArgs, manifest: Manifest, placed: PlacedMembers
) -> None:
    """Every `member_deployments` entry must name a deployment this layout can create (for
    `layout: auto`, any the plan could pick: it applies when the plan picks it)."""
    possible = possible_deployments(manifest.members, args.layout)
    unknown = sorted(set(args.member_deployments) - set(possible))
    if unknown:
        created = [g.deployment for g in placed.groups]
        raise ImpossibleConfig(
            f"member_deployments names {unknown}, which layout {args.layout.placement} "
            f"does not create; its member deployments are {created}"
        )
