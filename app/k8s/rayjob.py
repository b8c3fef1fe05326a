"""The batch-scoring RayJobs (ray.io/v1): `python -m app.batch` on a Ray cluster of its own.

One RayJob per served ensemble application, i.e. per (game, version) of serve_config.yaml,
stable and canary alike: a supervisor loads only its own version's snapshot, so a version
without its own run would have no precomputed tier. Each job scans the whole table (the
game filter trims the answer, not the read), so the profile's table read budget is split
evenly between the jobs, which `kubectl apply -k k8s/batch` starts together.

Shape, and why:
- `submissionMode: K8sJobMode`: KubeRay creates the cluster, waits for the dashboard, then
  a submitter Job runs `ray job submit` and follows the logs; the driver (the entrypoint)
  runs on the head pod. `shutdownAfterJobFinishes` deletes the cluster
  `ttlSecondsAfterFinished` after the job ends; `activeDeadlineSeconds` bounds a run;
  `backoffLimit` retries a failed run on a new cluster (a failed run never wrote its
  snapshot, so no supervisor reads it);
- the cluster is fixed size (`enableInTreeAutoscaling: false`, replicas = min = max): it
  lives for one run. So the head runs no autoscaler and needs no Kubernetes RBAC: head and
  workers both run as the batch ServiceAccount (the driver writes the snapshot, the workers
  scan and write Parquet), which mounts no API token;
- the head takes no read tasks or actors (`num-cpus: 0`); the worker group must hold every
  Scan segment's read task and the most scoring actors at once, with a CPU to spare for the
  Parquet writes (checked here: without an autoscaler, what does not fit never runs);
- token auth as on the RayService: KubeRay gives the token to every Ray container and to the
  submitter, so nothing else that reaches the dashboard can submit code;
- the submitter's pod is ours only to harden it (non-root, no API token, no AWS role, sized);
  KubeRay fills in its command;
- the table, region and output URI are in every Ray container's environment (the OFFERS_
  settings app.batch reads); credentials come from IRSA, as for the replicas;
- the version loads from the model store, as the replicas' does (the image holds no model):
  the entrypoint passes `--artifacts <model_store.uri>`, and every Ray pod has the
  RayService's node cache (app.k8s.pods.model_cache). The driver reads the version's
  manifest through the head's cache and each scoring actor materializes the version into its
  worker's, so head and workers both need the batch role's read of the models prefix.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Any

from app.config.batch_args import BatchJobArgs
from app.k8s.pods import (
    DASHBOARD_PORT,
    METRICS_PORT,
    RayPod,
    container_security,
    head_start_params,
    labels,
    pod_security,
    ray_pod,
)
from app.k8s.profile import (
    DNS_1035_LABEL,
    ProductionProfile,
)

# KubeRay names the job's RayCluster `<rayjob>-<5 chars>`, at most 53 characters
# (ray-operator/controllers/ray/utils/constant.go, MaxRayJobNameLength).
MAX_RAYJOB_NAME = 47
SUBMISSION_MODE = "K8sJobMode"
SUBMITTER_CONTAINER = "ray-job-submitter"  # KubeRay's name for it (utils.SubmitterContainerName)
ENTRYPOINT_PREFIX = ("python", "-m", "app.batch")
# What app.batch reserves per Scan segment (BatchJobArgs.read_num_cpus, not a CLI option).
READ_NUM_CPUS = float(BatchJobArgs.model_fields["read_num_cpus"].default)
# Beyond the read tasks and actors: the Parquet write tasks and Ray Data's own.
SPARE_CPUS = 1.0
FOLDER = "batch"
SAFE_TOKEN = re.compile(r"^[A-Za-z0-9._:=/-]+$")


class BatchConfigError(ValueError):
    """The batch RayJobs cannot be rendered as the profile asks."""


@dataclass(frozen=True)
class BatchTarget:
    """One served ensemble version: what one RayJob scores."""

    profile: str
    game: str
    version: str


def job_name(profile: ProductionProfile, target: BatchTarget) -> str:
    name = f"{profile.name}-batch-{target.game}-{target.version}"
    if len(name) > MAX_RAYJOB_NAME or not re.fullmatch(DNS_1035_LABEL, name):
        raise BatchConfigError(
            f"RayJob name {name!r} ({len(name)} characters) is not a DNS-1035 label of at "
            f"most {MAX_RAYJOB_NAME} characters (KubeRay); shorten `name` in the profile or "
            "the game or version"
        )
    return name


def file_name(target: BatchTarget) -> str:
    return f"{FOLDER}/rayjob-{target.game}-{target.version}.yaml"


def entrypoint_argv(profile: ProductionProfile, target: BatchTarget, jobs: int) -> list[str]:
    knobs = profile.batch.job
    argv = [
        *ENTRYPOINT_PREFIX,
        "--game",
        target.game,
        "--version",
        target.version,
        "--profile",
        target.profile,
        # The published version, as the replicas load it (serveConfigV2's args.artifacts).
        "--artifacts",
        profile.model_store.uri,
        "--segments",
        str(knobs.segments),
        "--read-budget",
        f"{knobs.table_read_budget_per_s / jobs:g}",
        "--read-budget-unit",
        knobs.read_budget_unit,
        "--batch-size",
        str(knobs.batch_size),
        "--actors",
        f"{knobs.min_actors}:{knobs.max_actors}",
        "--actor-num-cpus",
        f"{knobs.actor_num_cpus:g}",
    ]
    check_entrypoint(argv)
    return argv


def check_entrypoint(argv: list[str]) -> BatchJobArgs:
    """The entrypoint as app.batch will parse it: its own argument parser and typed args."""
    from app.batch.cli import parser, to_args

    if tuple(argv[: len(ENTRYPOINT_PREFIX)]) != ENTRYPOINT_PREFIX:
        raise BatchConfigError(f"the entrypoint must start with {' '.join(ENTRYPOINT_PREFIX)}")
    unsafe = [t for t in argv if not SAFE_TOKEN.fullmatch(t)]
    if unsafe:  # the submitter passes the entrypoint through a shell
        raise BatchConfigError(f"entrypoint arguments {unsafe} need shell quoting")
    try:
        return to_args(parser().parse_args(argv[len(ENTRYPOINT_PREFIX) :]))
    except SystemExit as exc:  # argparse reports on stderr and exits
        raise BatchConfigError(f"app.batch refuses the entrypoint {argv}") from exc


def check_batch_cluster(profile: ProductionProfile) -> float:
    """CPUs the job asks for at most; BatchConfigError if the fixed worker group cannot hold
    them. Without an autoscaler, an actor or read task that does not fit never starts."""
    batch = profile.batch
    knobs, workers = batch.job, batch.workers
    problems = []
    if knobs.actor_num_cpus > workers.cpu:
        problems.append(
            f"one scoring actor ({knobs.actor_num_cpus:g} CPU) does not fit on one worker pod "
            f"({workers.cpu:g} CPU)"
        )
    wanted = knobs.max_actors * knobs.actor_num_cpus + knobs.segments * READ_NUM_CPUS
    capacity = workers.replicas * workers.cpu
    if wanted + SPARE_CPUS > capacity:
        problems.append(
            f"max_actors x actor_num_cpus + segments x {READ_NUM_CPUS:g} = {wanted:g} CPUs, "
            f"plus {SPARE_CPUS:g} spare for the writes, exceeds {workers.replicas} workers x "
            f"{workers.cpu:g} = {capacity:g}"
        )
    if problems:
        raise BatchConfigError("batch cluster: " + "; ".join(problems))
    return wanted


def batch_documents(
    profile: ProductionProfile, targets: list[BatchTarget], *, image: str, ray_version: str
) -> dict[str, dict[str, Any]]:
    """Every file of k8s/batch/, by path relative to k8s/."""
    if not targets:
        raise BatchConfigError("serve_config.yaml serves no ensemble version to score")
    clashes = [t for t, n in Counter((t.game, t.version) for t in targets).items() if n > 1]
    if clashes:  # one output folder and one RayJob name per (game, version)
        raise BatchConfigError(f"(game, version) served under more than one profile: {clashes}")
    check_batch_cluster(profile)
    documents: dict[str, dict[str, Any]] = {
        f"{FOLDER}/serviceaccount.yaml": service_account(profile)
    }
    for target in targets:
        documents[file_name(target)] = rayjob(
            profile, target, image=image, ray_version=ray_version, jobs=len(targets)
        )
    documents[f"{FOLDER}/kustomization.yaml"] = kustomization(
        profile, [path.removeprefix(f"{FOLDER}/") for path in documents]
    )
    return documents


def service_account(profile: ProductionProfile) -> dict[str, Any]:
    batch = profile.batch
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": batch.service_account,
            "namespace": profile.namespace,
            "annotations": {"eks.amazonaws.com/role-arn": profile.aws.role_arn(batch.role_name)},
        },
        # Head and workers run as this account and never call the Kubernetes API: no
        # autoscaler in a fixed-size cluster, and the submitter (a pod of its own) only
        # talks to the dashboard. IRSA's token is a separate projected volume, unaffected.
        "automountServiceAccountToken": False,
    }


def kustomization(profile: ProductionProfile, resources: list[str]) -> dict[str, Any]:
    """Applied on its own (`kubectl apply -k k8s/batch`): deploying the service never starts a
    job. The namespace comes from the service's kustomization."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": profile.namespace,
        "resources": resources,
    }


def rayjob(
    profile: ProductionProfile,
    target: BatchTarget,
    *,
    image: str,
    ray_version: str,
    jobs: int,
) -> dict[str, Any]:
    batch = profile.batch
    workers = batch.workers
    name = job_name(profile, target)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": profile.namespace,
            "labels": labels(name, "batch"),
        },
        "spec": {
            "entrypoint": shlex.join(entrypoint_argv(profile, target, jobs)),
            "submissionMode": SUBMISSION_MODE,
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": batch.ttl_after_finished_s,
            "activeDeadlineSeconds": batch.active_deadline_s,
            "backoffLimit": batch.backoff_limit,
            "submitterPodTemplate": _submitter(profile, name, image=image),
            "rayClusterSpec": {
                "rayVersion": ray_version,
                "authOptions": {"mode": "token"},
                "enableInTreeAutoscaling": False,
                "headGroupSpec": {
                    "rayStartParams": head_start_params(),
                    "template": _pod(
                        profile,
                        name,
                        image=image,
                        role="ray-head",
                        cpu=batch.head.cpu,
                        memory_gib=batch.head.memory_gib,
                        shm_gib=None,
                        ports=[
                            ("gcs-server", 6379),
                            ("dashboard", DASHBOARD_PORT),
                            ("client", 10001),
                            ("metrics", METRICS_PORT),
                        ],
                    ),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": workers.name,
                        "replicas": workers.replicas,
                        "minReplicas": workers.replicas,
                        "maxReplicas": workers.replicas,
                        "rayStartParams": {
                            "metrics-export-port": str(METRICS_PORT),
                            "object-store-memory": str(int(workers.object_store_gib * 2**30)),
                        },
                        "template": _pod(
                            profile,
                            name,
                            image=image,
                            role="ray-worker",
                            cpu=workers.cpu,
                            memory_gib=workers.memory_gib,
                            shm_gib=workers.object_store_gib,
                            ports=[("metrics", METRICS_PORT)],
                        ),
                    }
                ],
            },
        },
    }


def _pod(
    profile: ProductionProfile,
    instance: str,
    *,
    image: str,
    role: str,
    cpu: float,
    memory_gib: float,
    shm_gib: float | None,
    ports: list[tuple[str, int]],
) -> dict[str, Any]:
    """A batch Ray pod (head: the driver; workers: the scoring actors), as the batch role:
    both load the version through the node cache. Its labels are not the RayService's
    instance: its PodMonitor and Serve service never select these."""
    env = [
        {"name": "OFFERS_DYNAMODB_TABLE", "value": profile.dynamodb.table},
        {"name": "OFFERS_AWS_REGION", "value": profile.aws.region},
        {"name": "OFFERS_BATCH_OUTPUT_URI", "value": profile.batch.output_uri},
    ]
    return ray_pod(
        profile,
        RayPod(
            role=role,
            labels=labels(instance, f"batch-{role}"),
            image=image,
            service_account=profile.batch.service_account,
            cpu=cpu,
            memory_gib=memory_gib,
            shm_gib=shm_gib,
            ports=ports,
            env=env,
        ),
    )


def _submitter(profile: ProductionProfile, instance: str, *, image: str) -> dict[str, Any]:
    # KubeRay's default submitter would run as the namespace's default account with its API
    # token mounted. This one has no token and no AWS role (no serviceAccountName: the
    # default account, which has no IRSA annotation): it only talks to the dashboard, with
    # the Ray token KubeRay adds to its environment. No command: KubeRay writes it.
    resources = {"cpu": "500m", "memory": "1Gi"}
    return {
        "metadata": {"labels": labels(instance, "batch-submitter")},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": pod_security(),
            "containers": [
                {
                    "name": SUBMITTER_CONTAINER,
                    "image": image,
                    "imagePullPolicy": profile.image.pull_policy,
                    "resources": {"requests": dict(resources), "limits": dict(resources)},
                    "securityContext": container_security(),
                }
            ],
        },
    }
