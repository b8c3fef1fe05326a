"""The RayService (ray.io/v1): the production Serve config on an autoscaled Ray cluster.

Shape, and why:
- the head runs GCS, the dashboard (its REST API is what `serve deploy`/`serve status` and
  KubeRay use), the Serve controller and the autoscaler, and no replicas (`num-cpus: 0`), so
  a busy replica never starves the control plane;
- one CPU worker group holds every replica; the Ray autoscaler adds and removes its pods
  as Serve's replica autoscaling asks for more or fewer (enableInTreeAutoscaling);
- every Ray container gets Serve's process settings (app.config.ray_env): the controller on
  the head, HAProxy on every node and the replicas all read them at start;
- head and workers run as the serve ServiceAccount (IRSA): the replicas read DynamoDB, the
  snapshots and the model store, and Serve builds every application on the head, which
  loads its version from the model store too;
- every Ray pod has a node cache for the model store's versions (an emptyDir): the image
  holds no model;
- `upgradeStrategy: NewCluster`: a change to the cluster (image, pods) starts a new
  cluster, moves the Serve service over once its applications are healthy, then deletes
  the old one. A change to serveConfigV2 alone (canary weights, knobs, a new version) is
  applied in place, with no new cluster; nothing in rayClusterConfig depends on which
  versions are served (the image tag, the edge limits), so a new version is such a change;
- probes are left to KubeRay, which injects Ray's own health checks.
"""

from __future__ import annotations

from typing import Any

import yaml

from app.config.edge import EDGE_ENV
from app.config.ray_env import ray_node_env
from app.config.router_args import RouterAppArgs
from app.config.serve_document import ROUTER_IMPORT_PATH, edge_config
from app.k8s.dockerfile import EDGE_BINARY
from app.k8s.pods import DASHBOARD_PORT, METRICS_PORT, RayPod, head_start_params, labels, ray_pod
from app.k8s.profile import ProductionProfile

SERVE_PORT = 8000
HAPROXY_METRICS_PORT = 9101  # Serve's HAProxy exporter (RAY_SERVE_HAPROXY_METRICS_PORT)
API_KEY_MOUNT = "/etc/dynamic-offers/api-key"
API_KEY_FILE_KEY = "sha256"
UPGRADE_STRATEGY = "NewCluster"


def image_tag(project_version: str, build: str, ray_version: str, python: str) -> str:
    """<project version>-build.<fingerprint>-ray<Ray>-py<Python>: new code or pins are a new
    tag (app.k8s.render.build_fingerprint), a new ensemble version is not (the image holds
    no model), and the tag names the Ray and Python it runs."""
    return f"{project_version}-build.{build}-ray{ray_version}-py{python.replace('.', '')}"


def rayservice(
    profile: ProductionProfile, serve_config_v2: str, *, image: str, ray_version: str
) -> dict[str, Any]:
    workers = profile.workers
    # Admission at the edge (app.edge): Serve starts the image's offers-haproxy as its
    # HAProxy on every node, with the limits of the applications clients reach through it.
    edge = {
        "RAY_SERVE_HAPROXY_BINARY_PATH": EDGE_BINARY,
        EDGE_ENV: edge_config(front_doors(yaml.safe_load(serve_config_v2))).model_dump_json(),
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": profile.name,
            "namespace": profile.namespace,
            "labels": labels(profile.name, "rayservice"),
        },
        "spec": {
            "upgradeStrategy": {"type": UPGRADE_STRATEGY},
            # The head runs no replicas, so it never answers logins.
            "excludeHeadPodFromServeSvc": True,
            "serveService": _serve_service(profile),
            "serveConfigV2": serve_config_v2,
            "rayClusterConfig": {
                "rayVersion": ray_version,
                # Ray's token auth on the dashboard, GCS and every control-plane call: KubeRay
                # creates the token Secret and sets RAY_AUTH_MODE/RAY_AUTH_TOKEN on every Ray
                # container (Ray >= 2.52). Without it, anyone who reaches a pod's dashboard
                # port could deploy code. `serve status` inside the head pod has the token.
                "authOptions": {"mode": "token"},
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "upscalingMode": "Default",
                    "idleTimeoutSeconds": workers.idle_timeout_s,
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "512Mi"},
                        "limits": {"cpu": "500m", "memory": "512Mi"},
                    },
                },
                "headGroupSpec": {
                    "rayStartParams": head_start_params(),
                    "template": _pod(
                        profile,
                        image=image,
                        role="ray-head",
                        # The serve account: Serve builds each application in a zero-CPU task
                        # the controller starts, which Ray's default scheduling runs on the
                        # controller's node, the head; the build loads the version from the
                        # model store, which only the serve role reads. KubeRay binds the
                        # autoscaler sidecar's RBAC (patch pods, RayClusters) to the head's
                        # account when one is named; the sidecar needs the API token the
                        # account does not mount, so this pod mounts it (the workers, same
                        # account, still have none).
                        service_account=profile.service_account,
                        api_token=True,
                        cpu=profile.head.cpu,
                        memory_gib=profile.head.memory_gib,
                        shm_gib=None,
                        ports=[
                            ("gcs-server", 6379),
                            ("dashboard", DASHBOARD_PORT),
                            ("client", 10001),
                            ("serve", SERVE_PORT),
                            ("metrics", METRICS_PORT),
                            ("haproxy-metrics", HAPROXY_METRICS_PORT),
                        ],
                        edge=edge,
                    ),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": workers.name,
                        "replicas": workers.min_replicas,
                        "minReplicas": workers.min_replicas,
                        "maxReplicas": workers.max_replicas,
                        "rayStartParams": {
                            "metrics-export-port": str(METRICS_PORT),
                            # Exactly what app.k8s.sizing checked the deployments against.
                            "memory": str(int(workers.schedulable_memory_gib() * 2**30)),
                            "object-store-memory": str(int(workers.object_store_gib * 2**30)),
                        },
                        "template": _pod(
                            profile,
                            image=image,
                            role="ray-worker",
                            service_account=profile.service_account,
                            api_token=False,
                            cpu=workers.cpu,
                            memory_gib=workers.memory_gib,
                            shm_gib=workers.object_store_gib,
                            ports=[
                                ("serve", SERVE_PORT),
                                ("metrics", METRICS_PORT),
                                ("haproxy-metrics", HAPROXY_METRICS_PORT),
                            ],
                            edge=edge,
                        ),
                    }
                ],
            },
        },
    }


def front_doors(document: dict[str, Any]) -> dict[str, Any]:
    """The Serve config with only the applications clients reach through HAProxy: every
    router, and every ensemble application no router fronts.

    The edge limits are in every Ray container's environment (OFFERS_EDGE, read when Ray
    starts), so in rayClusterConfig, where any change is a new cluster. A version behind its
    game's router is reached by the router through Serve handles, not through HAProxy, so
    leaving it out keeps rayClusterConfig the same when a version is added (weight 0 behind
    the router): serveConfigV2 alone changes, in place. Its own route still answers, with
    the edge's limits for unlisted applications (EdgeConfig.unlisted: an answer timeout, no
    fallback proxy to hang in) and the supervisor's own admission bound (503, Retry-After)."""
    apps = document.get("applications") or []
    fronted = {
        name
        for app in apps
        if app.get("import_path") == ROUTER_IMPORT_PATH
        for name in RouterAppArgs.model_validate(app.get("args") or {}).applications().values()
    }
    return {**document, "applications": [a for a in apps if a.get("name") not in fronted]}


def _serve_service(profile: ProductionProfile) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{profile.name}-serve", "labels": labels(profile.name, "serve")},
        "spec": {
            "type": "ClusterIP",
            "ports": [{"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT}],
        },
    }


def _pod(
    profile: ProductionProfile,
    *,
    image: str,
    role: str,
    service_account: str,
    api_token: bool,
    cpu: float,
    memory_gib: float,
    shm_gib: float | None,
    ports: list[tuple[str, int]],
    edge: dict[str, str],
) -> dict[str, Any]:
    """A RayService pod: Serve's process settings and the edge's limits in its environment,
    the API key's digest mounted from its Secret."""
    env = [{"name": k, "value": v} for k, v in {**ray_node_env(cpu), **edge}.items()]
    env.append(
        {"name": "OFFERS_API_KEY_SHA256_FILE", "value": f"{API_KEY_MOUNT}/{API_KEY_FILE_KEY}"}
    )
    return ray_pod(
        profile,
        RayPod(
            role=role,
            labels=labels(profile.name, role),
            image=image,
            service_account=service_account,
            api_token=api_token,
            cpu=cpu,
            memory_gib=memory_gib,
            shm_gib=shm_gib,
            ports=ports,
            env=env,
            mounts=[{"name": "api-key", "mountPath": API_KEY_MOUNT, "readOnly": True}],
            volumes=[
                {
                    "name": "api-key",
                    "secret": {
                        "secretName": profile.api_key_secret,
                        "items": [{"key": API_KEY_FILE_KEY, "path": API_KEY_FILE_KEY}],
                    },
                }
            ],
        ),
    )
