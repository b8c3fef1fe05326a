"""The Ray pods of the RayService and of the batch RayJobs, built once: labels, the `ray`
user, the container's resources and security, the node cache of the model store, and the
object store's shared memory. Each caller adds its own environment, mounts and identity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from app.k8s.profile import ProductionProfile, k8s_quantity_cpu, k8s_quantity_gib

# OFFERS_MODEL_CACHE_DIR on every Ray pod: the model store's node cache, an emptyDir.
MODEL_CACHE_MOUNT = "/home/ray/model-cache"
# The official Ray image runs as `ray` (uid 1000, group users 100); the Dockerfile keeps it.
RAY_UID = 1000
RAY_GID = 100
METRICS_PORT = 8080  # Ray's metrics export port: KubeRay's default, scraped by the PodMonitor
DASHBOARD_PORT = 8265


def head_start_params() -> dict[str, str]:
    """`rayStartParams` of every head (service and batch): no work scheduled on it, its
    dashboard reachable in the cluster, its metrics on the scraped port."""
    return {
        "num-cpus": "0",
        "dashboard-host": "0.0.0.0",
        "metrics-export-port": str(METRICS_PORT),
    }


def labels(instance: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dynamic-offers",
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/component": component,
    }


def pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RAY_UID, "runAsGroup": RAY_GID, "fsGroup": RAY_GID}


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


class NodeCache(NamedTuple):
    """The model store's node cache of one Ray pod: its volume, the container's mount of it,
    and the variable that points app.adapters.model_store at the mount."""

    volume: dict[str, Any]
    mount: dict[str, Any]
    env: dict[str, str]


def model_cache(profile: ProductionProfile) -> NodeCache:
    """The model store's node cache (app.adapters.model_store), on every Ray pod that loads a
    version: the RayService's (replicas, and the head, which builds the applications) and the
    batch RayJobs' (the driver and the scoring actors). A pod is one Ray node, so every
    process of the node shares it: one download per version and pod, under the store's file
    lock. It outlives a restart of the Ray container (the node comes back on its verified
    copies), and its size limit is the pod's own: a cache grown past it evicts this pod,
    whose replacement fetches only what it needs then, instead of filling the node's disk
    under other pods. On disk: memory is the replicas' and actors'."""
    name = "model-cache"
    return NodeCache(
        volume={
            "name": name,
            "emptyDir": {"sizeLimit": k8s_quantity_gib(profile.model_store.cache_gib)},
        },
        mount={"name": name, "mountPath": MODEL_CACHE_MOUNT},
        env={"name": "OFFERS_MODEL_CACHE_DIR", "value": MODEL_CACHE_MOUNT},
    )


@dataclass(frozen=True)
class RayPod:
    """One Ray container's pod, as its caller wants it."""

    role: str  # the container's name
    labels: dict[str, str]
    image: str
    service_account: str
    cpu: float
    memory_gib: float
    shm_gib: float | None  # the object store's /dev/shm; None: the container default
    ports: list[tuple[str, int]]
    env: list[dict[str, str]]  # before the node cache's variable
    mounts: list[dict[str, Any]] = field(default_factory=list)  # before the node cache's
    volumes: list[dict[str, Any]] = field(default_factory=list)
    api_token: bool = False  # mount the ServiceAccount's Kubernetes API token


def ray_pod(profile: ProductionProfile, pod: RayPod) -> dict[str, Any]:
    resources = {"cpu": k8s_quantity_cpu(pod.cpu), "memory": k8s_quantity_gib(pod.memory_gib)}
    cache = model_cache(profile)
    mounts = [*pod.mounts, cache.mount]
    volumes = [*pod.volumes, cache.volume]
    if pod.shm_gib is not None:
        # The object store lives in /dev/shm; the container default (64 MiB) is too small.
        # A quarter GiB above the store: anything else in /dev/shm would otherwise make Ray
        # find too little room and put the store on disk.
        mounts.append({"name": "shared-mem", "mountPath": "/dev/shm"})
        volumes.append(
            {
                "name": "shared-mem",
                "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity_gib(pod.shm_gib + 0.25)},
            }
        )
    # IRSA: the EKS webhook gives every container of this ServiceAccount's pods the role's
    # web identity (its own projected token); boto3's default chain and pyarrow's S3
    # filesystem pick it up.
    identity: dict[str, Any] = {"serviceAccountName": pod.service_account}
    if pod.api_token:
        identity["automountServiceAccountToken"] = True
    return {
        "metadata": {"labels": pod.labels},
        "spec": {
            **identity,
            "securityContext": pod_security(),
            "containers": [
                {
                    "name": pod.role,
                    "image": pod.image,
                    "imagePullPolicy": profile.image.pull_policy,
                    # Requests equal limits: Ray sizes itself from the limits, and the pod is
                    # never throttled below what Ray believes it has.
                    "resources": {"requests": dict(resources), "limits": dict(resources)},
                    "ports": [{"name": n, "containerPort": p} for n, p in pod.ports],
                    "env": [*pod.env, cache.env],
                    "volumeMounts": mounts,
                    "securityContext": container_security(),
                }
            ],
            "volumes": volumes,
        },
    }
