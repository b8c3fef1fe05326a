"""Real Ray Serve, real dynalite, real HTTP: the tiny ensemble deployed as `serve deploy` does
(tests.integration.serve_apps)."""

from __future__ import annotations

import os
import time

import pytest

from app.contract import deployments
from app.local.processes import LOCAL_CREDENTIALS, free_port
from loadtest.harness.http_ready import wait_answers
from tests.conftest import TEST_GAME, TEST_TABLE, TEST_VERSION
from tests.integration.serve_apps import BUILD_APP, BUILD_ROUTER, ServeApps, app_config

APP_NAME = f"{TEST_GAME}-{TEST_VERSION}"
ROUTE_PREFIX = f"/{TEST_GAME}/{TEST_VERSION}"
STORE_BUCKET = "offers-models"
SUPERVISOR = deployments.SUPERVISOR
NATIVE_APP = "native-runtime"

# The applications of the session's cluster (serve_app): one declarative config.
APPS = ServeApps()


@pytest.fixture(scope="session")
def batch_output_root(tmp_path_factory):
    """Where batch runs write and supervisors look for precomputed snapshots."""
    return tmp_path_factory.mktemp("batch-output")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The model store's S3-protocol server (moto's server mode), its bucket made."""
    from app.local.s3_server import S3Server

    log = tmp_path_factory.mktemp("s3") / "moto.log"
    with S3Server(free_port(), log_path=log) as server:
        server.ensure_bucket(STORE_BUCKET)
        yield server


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory):
    """The node cache of the replicas the integration cluster starts."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def serve_app(tiny_version_dir, dynalite_server, batch_output_root, s3_server, model_cache_dir):
    """Base URL of the deployed application; Serve and Ray are shut down afterwards."""
    import ray
    from ray import serve

    # Replicas read their settings from the environment they inherit from the raylet, which
    # inherits ours: point them at the test dynalite.
    env = {
        "OFFERS_DYNAMODB_ENDPOINT_URL": dynalite_server.endpoint_url,
        "OFFERS_DYNAMODB_TABLE": TEST_TABLE,
        "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIALS["aws_secret_access_key"],
        # Every read reaches dynalite (the outage test judges each answer), and a stopped
        # store is retried 1 s after the breaker opens.
        "OFFERS_FEATURE_CACHE_TTL_S": "0",
        "OFFERS_DYNAMODB_BREAKER_RESET_TIMEOUT_S": "1",
        "OFFERS_BATCH_OUTPUT_URI": str(batch_output_root),
        # Applications whose args name a model store load from this server, and a batch job
        # given an s3:// output writes to it (pyarrow and boto3 read the standard variable).
        "OFFERS_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "AWS_ENDPOINT_URL_S3": s3_server.endpoint_url,
        "OFFERS_MODEL_CACHE_DIR": str(model_cache_dir),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    port = free_port()
    # address="local": always a fresh instance, never a cluster someone started with `ray start`.
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env={"env_vars": env})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        deploy(app_args(tiny_version_dir))
        base = f"http://127.0.0.1:{port}{ROUTE_PREFIX}"
        wait_answers(f"{base}/healthz", timeout_s=60, poll_s=0.2)
        yield base
    finally:
        # ray.shutdown() stops the processes of the cluster this driver started, replicas
        # included, at once. A serve.shutdown() first drained every replica one by one
        # (Serve's 2 s wait loop each): 6-9 s of the suite's end.
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def native_app(serve_app, tiny_version_dir):
    """Base URL of the integration application scored by each training library's own predict
    (`runtime: native`), planned: every tiny member inline, one replica. One application for
    every module that compares runtimes (test_peer_parity, test_member_placement): each
    replica fewer is seconds of CPU on a 2-core host."""
    base = serve_app.rsplit("/", 2)[0]  # http://host:port
    args = app_args(tiny_version_dir, layout={"placement": "auto"}, runtime="native")
    deploy(args, name=NATIVE_APP, route_prefix=f"/{NATIVE_APP}")
    # No undeploy: it lives as long as the session's cluster, which stops with its replicas.
    return f"{base}/{NATIVE_APP}"


def app_args(tiny_version_dir, **overrides) -> dict:
    """The integration application's args, as a Serve config carries them (checked here, so
    a test's typo fails at once): tiny ensemble, one deployment (and replica) per member,
    one supervisor replica: these tests judge answers, not scaling (test_autoscaling does)."""
    from app.config.app_args import EnsembleAppArgs

    one_replica = {"autoscaling": {"min_replicas": 1, "max_replicas": 1}}
    args = {
        "game": TEST_GAME,
        "version": TEST_VERSION,
        "profile": "tiny",
        "artifacts_root": str(tiny_version_dir.parents[2]),
        "members": one_replica,
        "supervisor": one_replica,
        **overrides,
    }
    EnsembleAppArgs.model_validate(args)
    return args


def deploy(
    args: dict,
    name: str = APP_NAME,
    route_prefix: str = ROUTE_PREFIX,
    user_configs: dict[str, dict] | None = None,
) -> None:
    """Deploys an ensemble application, or updates it in place: new args replace its
    replicas, new `user_configs` (deployment -> user_config) reconfigure them. Returns once
    it is RUNNING and replaced replicas are gone too (they may still finish requests)."""
    APPS.deploy(name, route_prefix, BUILD_APP, args, user_configs)
    deadline = time.monotonic() + 60
    while len(replica_actor_names(name, SUPERVISOR)) > 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"old supervisor replicas of {name} still running")
        time.sleep(0.2)


def reconfigure(user_configs: dict[str, dict], name: str = APP_NAME) -> None:
    """Live knobs of a deployed application (deployment -> user_config), the same replicas;
    `{}` gives every deployment back the user_config of its args."""
    APPS.reconfigure(name, user_configs)


def deploy_many(apps: dict[str, dict]) -> None:
    """Several ensemble applications (name -> args, each at route /<name>), started together."""
    APPS.deploy_many([app_config(name, f"/{name}", BUILD_APP, args) for name, args in apps.items()])


def undeploy(*names: str) -> None:
    APPS.delete(*names)


def slow_members(delays_ms: dict[str, float], supervisor: dict | None = None) -> dict[str, dict]:
    """The user_configs that inject `delays_ms` (member -> ms) wherever the members are
    scored (their deployments and the supervisor's inline ones), with `supervisor`'s other
    knobs. For the tests' one-deployment-per-member layout."""
    faults = {"slow_members_ms": delays_ms}
    configs: dict[str, dict] = {SUPERVISOR: {**(supervisor or {}), "faults": faults}}
    for member in delays_ms:
        configs[f"member-{member}"] = {"faults": faults}
    return configs


def deploy_router_over(
    serve_base: str, version_args, name: str, router_args: dict
) -> tuple[str, str, str]:
    """One version application (`version_args`) and a game router over it alone, as
    `<name>-version` and `<name>`; `router_args` go over the router's game and version.
    Returns the router's base URL and both application names (for undeploy)."""
    from urllib.parse import urlsplit

    from app.config.router_args import RouterAppArgs

    version_app, router_app = f"{name}-version", name
    args = {
        "game": TEST_GAME,
        "versions": [{"version": TEST_VERSION, "application": version_app, "weight": 1}],
        **router_args,
    }
    RouterAppArgs.model_validate(args)
    # The version first: a router started beside it reads Serve's status every 0.25 s while
    # the version deploys, and refuses (503, "unavailable") a login sent right after both
    # report RUNNING but before its next read (it failed a test that way on a loaded host).
    deploy(version_args, name=version_app, route_prefix=f"/{version_app}")
    APPS.deploy(router_app, f"/{router_app}", BUILD_ROUTER, args)
    return serve_base.replace(urlsplit(serve_base).path, f"/{router_app}"), version_app, router_app


def replica_actor_names(app_name: str, deployment: str) -> set[str]:
    """Names of the live replica actors of one deployment (Serve's namespace)."""
    import ray

    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and f"{app_name}#{deployment}#" in a["name"]
    }
