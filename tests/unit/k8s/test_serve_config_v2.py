"""serveConfigV2 is a Serve deploy config, and it is serve_config.yaml with only the
documented production overrides."""

from __future__ import annotations

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from app.config.app_args import EnsembleAppArgs
from app.config.knobs import deep_merge
from app.config.router_args import RouterAppArgs
from app.config.serve_document import BUILDER_IMPORT_PATH, ROUTER_IMPORT_PATH
from app.k8s.profile import ProductionProfile
from app.k8s.render import DEFAULT_CONFIG
from app.k8s.serve_config import ProductionConfigError, production_serve_config

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

LOCAL = yaml.safe_load(DEFAULT_CONFIG.read_text())


def changed_paths(before, after, prefix=()):
    """Key paths where two YAML documents differ (a changed leaf, or a key added/removed)."""
    if isinstance(before, dict) or isinstance(after, dict):
        before = before if isinstance(before, dict) else ({} if before is None else before)
        after = after if isinstance(after, dict) else ({} if after is None else after)
    if isinstance(before, dict) and isinstance(after, dict):
        paths = []
        for key in before.keys() | after.keys():
            paths += changed_paths(before.get(key), after.get(key), (*prefix, key))
        return paths
    return [] if before == after else [prefix]


def leaf_paths(document, prefix=()):
    if isinstance(document, dict) and document:
        return [p for k, v in document.items() for p in leaf_paths(v, (*prefix, k))]
    return [prefix]


def test_every_change_to_an_applications_args_is_one_the_profile_makes(serve_config_v2, profile):
    # Not the generator's merge again: each changed key path must be a path the profile's
    # overrides write, and each override must show in production.
    for local, prod in zip(LOCAL["applications"], serve_config_v2["applications"], strict=True):
        ensemble = local["import_path"] == BUILDER_IMPORT_PATH
        overrides = profile.serve.ensemble_args if ensemble else profile.serve.router_args
        if ensemble:  # where versions load from: the profile's model store
            overrides = {**overrides, "artifacts": profile.model_store.uri}
        # artifacts_root may go (a folder of this checkout), and nothing else.
        allowed = leaf_paths(overrides) + ([("artifacts_root",)] if ensemble else [])
        for path in changed_paths(local["args"], prod["args"]):
            assert any(path[: len(a)] == a for a in allowed), (local["name"], path)
        for path in leaf_paths(overrides):
            value = prod["args"]
            for key in path:
                value = value[key]
            expected = overrides
            for key in path:
                expected = expected[key]
            assert value == expected, (local["name"], path)


def test_local_credentials_endpoints_and_cache_never_ship_and_a_digest_is_refused(profile):
    app = dict(LOCAL["applications"][0])
    env = {
        **app["runtime_env"]["env_vars"],
        "AWS_SESSION_TOKEN": "t",
        "AWS_PROFILE": "me",
        "OFFERS_MODEL_CACHE_DIR": "/home/me/cache",  # the pods' cache volume decides
    }
    app["runtime_env"] = {"env_vars": env}
    config = production_serve_config({**LOCAL, "applications": [app]}, profile)
    shipped = config["applications"][0]["runtime_env"]["env_vars"]
    assert not [k for k in shipped if k.startswith("AWS_")]
    for local_only in (
        "OFFERS_DYNAMODB_ENDPOINT_URL",
        "OFFERS_S3_ENDPOINT_URL",
        "OFFERS_MODEL_CACHE_DIR",
    ):
        assert local_only in env and local_only not in shipped
    env["OFFERS_API_KEY_SHA256"] = "0" * 64
    with pytest.raises(ProductionConfigError, match="mounted Secret"):
        production_serve_config({**LOCAL, "applications": [app]}, profile)


def test_serve_config_v2_is_a_serve_deploy_config(serve_config_v2):
    schema = ServeDeploySchema.model_validate(serve_config_v2)
    assert [a.name for a in schema.applications] == [a["name"] for a in LOCAL["applications"]]
    assert schema.proxy_location == "EveryNode"
    assert schema.http_options.host == "0.0.0.0" and schema.http_options.port == 8000


def test_applications_are_the_local_ones_with_only_the_documented_overrides(
    serve_config_v2, profile: ProductionProfile
):
    local_apps = LOCAL["applications"]
    assert len(serve_config_v2["applications"]) == len(local_apps)
    for local, prod in zip(local_apps, serve_config_v2["applications"], strict=True):
        for key in ("name", "route_prefix", "import_path", "deployments"):
            assert prod.get(key) == local.get(key), (local["name"], key)
        if local["import_path"] == BUILDER_IMPORT_PATH:
            assert prod["args"] == {
                **deep_merge(local["args"], profile.serve.ensemble_args),
                "artifacts": profile.model_store.uri,
            }
            local_env = local["runtime_env"]["env_vars"]
            endpoints = {"OFFERS_DYNAMODB_ENDPOINT_URL", "OFFERS_S3_ENDPOINT_URL"}
            assert prod["runtime_env"]["env_vars"] == {
                **{
                    k: v
                    for k, v in local_env.items()
                    if not k.startswith("AWS_") and k not in endpoints
                },
                "OFFERS_DYNAMODB_TABLE": profile.dynamodb.table,
                "OFFERS_AWS_REGION": profile.aws.region,
                # Where the batch RayJobs write: the supervisors load their snapshot there.
                "OFFERS_BATCH_OUTPUT_URI": profile.batch.output_uri,
            }
        else:
            assert local["import_path"] == ROUTER_IMPORT_PATH
            assert prod["args"] == deep_merge(local["args"], profile.serve.router_args)
            assert prod.get("runtime_env") == local.get("runtime_env")
    top = {k: v for k, v in serve_config_v2.items() if k != "applications"}
    expected = {k: v for k, v in LOCAL.items() if k != "applications"}
    expected["proxy_location"] = profile.serve.proxy_location
    expected["http_options"] = {**LOCAL["http_options"], "host": profile.serve.http_host}
    expected["logging_config"] = {**LOCAL["logging_config"], "encoding": profile.serve.log_encoding}
    assert top == expected


def test_production_plans_its_layout_for_the_cluster_against_real_dynamodb_and_s3(
    serve_config_v2, rayservice, profile
):
    for app in serve_config_v2["applications"]:
        if app["import_path"] == BUILDER_IMPORT_PATH:
            args = EnsembleAppArgs.model_validate(app["args"])
            # Planned on the cluster for its load and cores, not for a 2-core laptop.
            assert args.layout.placement == "auto"
            assert args.layout.max_parallel is not None and args.layout.max_parallel > 2
            assert args.layout.expected_logins_per_s > 40
            assert args.supervisor.autoscaling.min_replicas >= 2
            assert args.supervisor.max_replicas_per_node == 1
            assert args.members.autoscaling.max_replicas > args.members.autoscaling.min_replicas
            # Every version from the profile's model store: the image holds none.
            assert args.artifacts_root is None
            assert args.version_source() == (
                f"{profile.model_store.uri}/{args.game}/{args.version}"
            )
        else:
            assert RouterAppArgs.model_validate(app["args"]).router.autoscaling.min_replicas >= 2
    text = rayservice["spec"]["serveConfigV2"]
    for local_only in (
        "OFFERS_DYNAMODB_ENDPOINT_URL",
        "OFFERS_S3_ENDPOINT_URL",
        "127.0.0.1",
        "4567",
        "4569",
        "AWS_SECRET_ACCESS_KEY",
    ):
        assert local_only not in text


def test_the_benchmarks_throughput_settings_reach_every_ray_container(rayservice):
    from app.config.ray_env import (
        SERVE_PROCESS_ENV,
        WORKER_START_CONCURRENCY_ENV,
        worker_start_concurrency,
    )

    cluster = rayservice["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in pods:
        container = group["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert SERVE_PROCESS_ENV.items() <= env.items()
        # Each pod starts workers on half its own cores, not the renderer's host's.
        limit = str(container["resources"]["limits"]["cpu"])
        cores = float(limit[:-1]) / 1000 if limit.endswith("m") else float(limit)
        assert env[WORKER_START_CONCURRENCY_ENV] == str(worker_start_concurrency(cores))


def test_the_edge_on_every_pod_bounds_the_front_doors_only(rayservice, serve_config_v2):
    # OFFERS_EDGE is in the pods' environment (rayClusterConfig): it lists what clients reach
    # through HAProxy, every router and any version no router fronts, so a version added
    # behind its router leaves the pods alone.
    from app.config.edge import EDGE_ENV, EdgeConfig
    from app.config.serve_document import edge_config

    cluster = rayservice["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    apps = serve_config_v2["applications"]
    routers = [a for a in apps if a["import_path"] == ROUTER_IMPORT_PATH]
    fronted = {
        n for r in routers for n in RouterAppArgs.model_validate(r["args"]).applications().values()
    }
    assert fronted and fronted <= {a["name"] for a in apps}
    front = [a for a in apps if a["name"] not in fronted]
    expected = edge_config({"applications": front})
    assert set(expected.backends) == {a["name"] for a in routers}
    for group in pods:
        env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
        assert EdgeConfig.model_validate_json(env[EDGE_ENV]) == expected
    # Without a router, the versions are the front doors, and keep their limits.
    from app.k8s.rayservice import front_doors

    alone = {"applications": [a for a in apps if a["import_path"] == BUILDER_IMPORT_PATH]}
    assert front_doors(alone) == alone


def test_an_override_that_breaks_the_args_is_refused_with_the_application(profile):
    bad = profile.model_copy(
        update={
            "serve": profile.serve.model_copy(update={"ensemble_args": {"layout": {"groups": 0}}})
        }
    )
    with pytest.raises(ProductionConfigError, match="galaxy-raiders-2026-11: args"):
        production_serve_config(LOCAL, bad)


def test_an_unknown_application_kind_is_refused(profile):
    foreign = {**LOCAL, "applications": [{"name": "x", "import_path": "other:app"}]}
    with pytest.raises(ProductionConfigError, match="neither the ensemble builder"):
        production_serve_config(foreign, profile)


@pytest.mark.parametrize(
    "source",
    [{"artifacts_root": "/home/me/models"}, {}, {"artifacts": "s3://other-store/models"}],
    ids=["a checkout folder", "the default folder", "another store"],
)
def test_every_ensemble_application_loads_from_the_profiles_store(profile, source):
    # The image holds no model and the serve role reads one store: whatever the local config
    # loads from, production loads the published version.
    app = dict(LOCAL["applications"][0])
    args = {k: v for k, v in app["args"].items() if k not in ("artifacts", "artifacts_root")}
    app["args"] = {**args, **source}
    (prod,) = production_serve_config({**LOCAL, "applications": [app]}, profile)["applications"]
    loaded = EnsembleAppArgs.model_validate(prod["args"])
    assert loaded.artifacts_root is None
    assert loaded.version_source() == f"{profile.model_store.uri}/{args['game']}/{args['version']}"
