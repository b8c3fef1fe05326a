"""The builder and the shipped Serve configs, without a running Ray: layouts, sizing, checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from ray.serve._private.build_app import build_app as serve_build
from ray.serve.schema import ServeDeploySchema

from app.config.app_args import MemberLayout
from app.config.router_args import RouterAppArgs
from app.config.settings import Settings
from app.local.processes import PROJECT_ROOT
from app.local.serve_config import (
    ROUTER_IMPORT_PATH,
    ConfigError,
    ConfiguredApp,
    check_deployment_overrides,
    configured_apps,
)
from app.serving.builder import (
    ImpossibleConfig,
    build_app,
    build_router,
    niced,
    replica_runtime_env,
)
from models.train import ensure_trained

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

SHIPPED = [PROJECT_ROOT / "serve_config.yaml", PROJECT_ROOT / "serve_config.production-layout.yaml"]


def deployments(app_args) -> dict[str, object]:
    """Deployment name -> its options, as Serve would deploy them (no cluster needed)."""
    built = serve_build(
        build_app(app_args), name="test-app", make_deployment_handle=lambda d, app: object()
    )
    return {d.name: d for d in built.deployments}


def started_niced() -> dict[str, object]:
    """The runtime_env every replica of the service starts with, built outside Ray (no
    application runtime_env to start from)."""
    niceness = Settings().replica_niceness
    runtime_env = {"env_vars": {}, **replica_runtime_env(niceness)}
    # `nice -n <niceness> <python> -m app.serving.worker_entry`
    command = str(runtime_env["py_executable"]).split()
    assert command[1:3] == ["-n", str(niceness)]
    assert command[-2:] == ["-m", "app.serving.worker_entry"]
    return runtime_env


def checkout_apps(path: Path) -> list[ConfiguredApp]:
    """The config's ensemble apps, loading from this checkout's trained folders: these
    tests build without a model store (tests/integration/adapters/test_model_store.py and
    the e2e walkthrough load through one)."""
    return [
        replace(app, args=app.args.model_copy(update={"artifacts": None}))
        for app in configured_apps(path)
    ]


@pytest.fixture(scope="module")
def standard_models() -> None:
    """The standard profile the shipped configs serve (cached after the first training)."""
    for path in SHIPPED:
        for app in configured_apps(path):
            ensure_trained(
                app.args.game, app.args.version, app.args.profile, root=Settings().artifacts_root
            )


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_pass_serve_schema_and_build(path: Path, standard_models) -> None:
    document = yaml.safe_load(path.read_text())
    ServeDeploySchema.model_validate(document)
    apps = checkout_apps(path)
    assert apps, "no ensemble application"
    for app in apps:
        check_deployment_overrides(app)
        built = deployments(app.args)
        members = [name for name in built if name != "supervisor"]
        supervisor = built["supervisor"]
        config = supervisor.init_args[0]  # the SupervisorConfig its replicas start with
        placed = config.inline + [m for names in config.groups.values() for m in names]
        assert len(placed) == 12 and len(set(placed)) == 12  # every member exactly once
        assert sorted(members) == sorted(config.groups)
        assert sorted(config.placements) == sorted(placed)
        if app.args.layout.placement == "per_member":
            assert len(members) == 12 and not config.inline
        elif app.args.layout.placement == "auto":
            # The plan's own view, shown by GET /v1/ensemble, says what was built.
            for name, view in config.placements.items():
                assert (view["placement"] == "inline") == (name in config.inline), view
                assert view["reason"]
        assert supervisor.ray_actor_options["num_cpus"] == app.args.supervisor.num_cpus
        # Every replica starts at its niceness (app.adapters.cpu_priority.start_niced).
        for name, deployment in built.items():
            assert deployment.ray_actor_options["runtime_env"] == started_niced(), name
        assert supervisor.max_ongoing_requests == app.args.supervisor.max_ongoing_requests
    # Every router application routes to versions this config deploys, and builds.
    served = {app.name for app in apps}
    for entry in document["applications"]:
        if entry["import_path"] != ROUTER_IMPORT_PATH:
            continue
        args = RouterAppArgs.model_validate(entry["args"])
        assert set(args.applications().values()) <= served, (entry["name"], served)
        built = serve_build(
            build_router(args), name=entry["name"], make_deployment_handle=lambda d, a: object()
        )
        assert [d.name for d in built.deployments] == ["router"]
        assert built.deployments[0].ray_actor_options["runtime_env"] == started_niced()
        # A login waits for a version's slot in the router within the edge's queue timeout.
        [config] = built.deployments[0].init_args
        assert config.queue_timeout_ms == args.admission.queue_timeout_ms(args.request_budget_ms)
        assert 0 < config.queue_timeout_ms < args.request_budget_ms


def test_production_layout_sizes_one_member_on_its_own(standard_models) -> None:
    [app] = checkout_apps(SHIPPED[1])  # one version in the production layout
    built = deployments(app.args)
    assert built["member-et-boot3"].ray_actor_options["num_cpus"] == 0.2
    assert built["member-xgb-all"].ray_actor_options["num_cpus"] == app.args.members.num_cpus


def test_removing_the_layout_from_the_local_config_still_deploys(standard_models) -> None:
    """What the config's comment suggests: drop `layout` and get the production layout."""
    document = yaml.safe_load(SHIPPED[0].read_text())
    args = dict(document["applications"][0]["args"])
    del args["layout"]
    args.pop("artifacts", None)  # from this checkout's folder
    built = deployments(args)
    assert "member-xgb-all" in built and "member-group-0" not in built


def test_member_deployments_must_name_deployments_the_layout_creates(standard_models) -> None:
    app = checkout_apps(SHIPPED[0])[0]
    grouped = app.args.model_copy(
        update={
            "layout": MemberLayout(placement="groups", groups=2),
            "member_deployments": {"member-xgb-all": {"num_cpus": 1}},
        }
    )
    with pytest.raises(ImpossibleConfig, match=r"member-group-0.*member-group-1"):
        build_app(grouped)
    # layout auto: any deployment a plan could make is accepted (it applies when made); a
    # name no plan can make is refused.
    assert app.args.layout.placement == "auto"
    build_app(app.args.model_copy(update={"member_deployments": {"member-xgb-all": {}}}))
    with pytest.raises(ImpossibleConfig, match="member-nope"):
        build_app(app.args.model_copy(update={"member_deployments": {"member-nope": {}}}))


@pytest.mark.parametrize(
    ("layout", "name"),
    [({"groups": 2}, "member-xgb-all"), ({"placement": "auto"}, "member-nope")],
)
def test_a_serve_override_for_a_deployment_the_layout_lacks_is_explained(
    standard_models, tmp_path: Path, layout: dict, name: str
) -> None:
    document = yaml.safe_load(SHIPPED[0].read_text())
    document["applications"][0]["args"]["layout"] = layout
    document["applications"][0]["deployments"] = [{"name": name, "num_replicas": 2}]
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(document))
    app = checkout_apps(path)[0]
    with pytest.raises(ConfigError, match="does not create"):
        check_deployment_overrides(app)


def test_a_version_of_another_profile_is_refused_at_build(standard_models, tmp_path) -> None:
    """A store holds one build of a version: an application asking for another profile of
    it must not serve the published one under the wrong name. Here the `tiny` folder of the
    version holds the standard build."""
    app = checkout_apps(SHIPPED[0])[0]
    game, version = app.args.game, app.args.version
    (tmp_path / "tiny" / game).mkdir(parents=True)
    (tmp_path / "tiny" / game / version).symlink_to(app.args.version_dir())
    mislabelled = app.args.model_copy(update={"profile": "tiny", "artifacts_root": tmp_path})
    with pytest.raises(ValueError, match="of profile 'standard', not .* of 'tiny'"):
        build_app(mislabelled)
    build_app(app.args)  # the same folder under its own profile builds


@pytest.mark.parametrize(
    "application",
    [
        {"env_vars": {"OFFERS_DYNAMODB_TABLE": "t", "AWS_ACCESS_KEY_ID": "local"}},
        {},  # a router application: no runtime_env in its config
    ],
    ids=["with-env-vars", "none"],
)
def test_a_niced_deployment_keeps_the_applications_runtime_env_and_survives_a_redeploy(
    monkeypatch, application
) -> None:
    """Serve hands a deployment the application's runtime_env only when its code sets none,
    so the niced start carries it itself (or the replicas would start without their DynamoDB
    endpoint and credentials). A `serve deploy` that overrides the deployment's options
    merges the application's runtime_env into it again with Serve's own function: the result
    must be the same runtime_env, or Serve replaces every replica (a live knob change)."""
    from ray.serve._private.utils import override_runtime_envs_except_env_vars

    monkeypatch.setattr("app.serving.builder.application_runtime_env", lambda: application)
    options = niced({"name": "supervisor", "ray_actor_options": {"num_cpus": 0.2}})
    runtime_env = options["ray_actor_options"]["runtime_env"]
    assert options["ray_actor_options"]["num_cpus"] == 0.2
    assert runtime_env["env_vars"] == application.get("env_vars", {})
    assert (
        runtime_env["py_executable"]
        == replica_runtime_env(Settings().replica_niceness)["py_executable"]
    )
    assert override_runtime_envs_except_env_vars(application, runtime_env) == runtime_env
